# Run at build time (cmake -P) so that --version names the commit that was
# built, not the one CMake last configured at. Writes OUTPUT only when the
# commit changed, so an unchanged commit rebuilds nothing.
#   cmake -DSOURCE_DIR=... -DOUTPUT=.../git_commit.h -P WriteGitCommit.cmake
# The commit is HEAD's 12-digit short hash, with "-dirty" appended when the
# tracked files differ from HEAD (as git describe --dirty): a binary built
# from a modified tree says so in --version, /version and build_info.
set(commit unknown)
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND head)
    set(commit ${head})
    # Exit 1: differences (0: none, else an error, then no marker).
    # GIT_OPTIONAL_LOCKS=0: never take the index lock to refresh it, which
    # could make a concurrent git add/commit in this tree fail.
    execute_process(COMMAND ${CMAKE_COMMAND} -E env GIT_OPTIONAL_LOCKS=0
                            ${GIT_EXECUTABLE} diff --quiet HEAD --
                    WORKING_DIRECTORY ${SOURCE_DIR}
                    RESULT_VARIABLE dirty OUTPUT_QUIET ERROR_QUIET)
    if(dirty EQUAL 1)
      set(commit "${head}-dirty")
    endif()
  endif()
endif()
set(text "#define MOONCAKE_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUTPUT} "${text}")
endif()
