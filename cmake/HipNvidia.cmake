# Finds a HIP platform for the VRAM tier (tiers/gpu_tier.cc) without hipcc
# and without find_package(hip) (Debian's hip-config is AMD-only and stops
# with a hard error when hipcc is missing).
#
#   MOONCAKE_WITH_GPU       AUTO (default): build the VRAM tier when a HIP
#                           platform is found, otherwise build without it.
#                           ON: a HIP platform is required (error if none).
#                           OFF: build without it.
#   MOONCAKE_HIP_PLATFORM   AUTO (default), NVIDIA or AMD.
#                           NVIDIA: HIP headers (libamdhip64-dev ships
#                             hip/nvidia_detail/) + the CUDA toolkit; host
#                             code is compiled by the C++ compiler with
#                             __HIP_PLATFORM_NVIDIA__ and linked to
#                             CUDA::cudart only. HIP 5.2's NVIDIA header is
#                             patched for CUDA 12/13 into the build tree (see
#                             PatchHipNvidiaHeader.cmake).
#                           AMD: HIP headers + libamdhip64, compiled with
#                             __HIP_PLATFORM_AMD__ (host API only, no hipcc).
#                           AUTO picks NVIDIA when a CUDA toolkit is found,
#                           else AMD when libamdhip64 is found.
#
# Results:
#   MOONCAKE_GPU_ENABLED    TRUE when a platform was found and a probe
#                           program using it compiled and linked.
#   MOONCAKE_GPU_PLATFORM   "nvidia" or "amd" (empty when disabled).
#   MOONCAKE_GPU_REASON     why it is disabled (empty when enabled).
#   mooncake_hip            INTERFACE target (include dirs, definitions,
#                           runtime library); defined only when enabled.
#                           Link it PRIVATE and only into the code that
#                           includes <hip/hip_runtime_api.h>.
# Whether a device is present is a run-time question (GpuTier::DeviceCount).

include_guard(GLOBAL)

set(MOONCAKE_WITH_GPU AUTO CACHE STRING "Build the VRAM tier over the HIP runtime: AUTO, ON or OFF")
set_property(CACHE MOONCAKE_WITH_GPU PROPERTY STRINGS AUTO ON OFF)
set(MOONCAKE_HIP_PLATFORM AUTO CACHE STRING "HIP platform of the VRAM tier: AUTO, NVIDIA or AMD")
set_property(CACHE MOONCAKE_HIP_PLATFORM PROPERTY STRINGS AUTO NVIDIA AMD)

include(${CMAKE_CURRENT_LIST_DIR}/PatchHipNvidiaHeader.cmake)

set(MOONCAKE_GPU_ENABLED FALSE)
set(MOONCAKE_GPU_PLATFORM "")
set(MOONCAKE_GPU_REASON "")
set(_mc_probe_log "")

string(TOUPPER "${MOONCAKE_WITH_GPU}" _mc_gpu_mode)
if(_mc_gpu_mode MATCHES "^(ON|YES|TRUE|Y|1)$")
  set(_mc_gpu_mode ON)
elseif(_mc_gpu_mode MATCHES "^(OFF|NO|FALSE|N|0)$")
  set(_mc_gpu_mode OFF)
elseif(NOT _mc_gpu_mode STREQUAL "AUTO")
  message(FATAL_ERROR "MOONCAKE_WITH_GPU must be AUTO, ON or OFF (got '${MOONCAKE_WITH_GPU}')")
endif()
string(TOUPPER "${MOONCAKE_HIP_PLATFORM}" _mc_hip_platform)
if(NOT _mc_hip_platform MATCHES "^(AUTO|NVIDIA|AMD)$")
  message(FATAL_ERROR "MOONCAKE_HIP_PLATFORM must be AUTO, NVIDIA or AMD (got '${MOONCAKE_HIP_PLATFORM}')")
endif()

# Compiles and links a program that calls the HIP runtime through the given
# settings; sets ${result_var} and, on failure, ${result_var}_LOG. A success is
# remembered (keyed on compiler, settings and header contents) so that
# reconfiguring does not pay for the probe again.
function(_mooncake_hip_probe result_var platform_define include_dirs link_libs)
  set(key "${CMAKE_CXX_COMPILER}|${platform_define}|${include_dirs}|${link_libs}|${CUDAToolkit_VERSION}")
  foreach(dir IN LISTS include_dirs)
    foreach(header hip/hip_runtime_api.h hip/nvidia_detail/nvidia_hip_runtime_api.h)
      if(EXISTS ${dir}/${header})
        file(MD5 ${dir}/${header} sum)
        string(APPEND key "|${sum}")
      endif()
    endforeach()
  endforeach()
  string(MD5 key "${key}")
  if("$CACHE{MOONCAKE_HIP_PROBE_OK}" STREQUAL key)
    set(${result_var} TRUE PARENT_SCOPE)
    return()
  endif()
  set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/mooncake_hip_probe)
  file(WRITE ${dir}/probe.cc [=[
#include <hip/hip_runtime_api.h>
int main() {
  int count = 0;
  hipError_t error = hipGetDeviceCount(&count);
  void* device = nullptr;
  void* host = nullptr;
  hipStream_t stream = nullptr;
  if (hipMalloc(&device, 1) == hipSuccess && hipHostMalloc(&host, 1, hipHostMallocDefault) == hipSuccess &&
      hipStreamCreateWithFlags(&stream, hipStreamNonBlocking) == hipSuccess &&
      hipMemcpyAsync(device, host, 1, hipMemcpyHostToDevice, stream) == hipSuccess &&
      hipStreamSynchronize(stream) == hipSuccess) {
    return 0;
  }
  return error == hipSuccess ? count : 1;
}
]=])
  try_compile(ok ${dir}/build SOURCES ${dir}/probe.cc
    CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${include_dirs}"
    COMPILE_DEFINITIONS -D${platform_define}
    LINK_LIBRARIES ${link_libs}
    CXX_STANDARD 23 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF
    NO_CACHE
    OUTPUT_VARIABLE log)
  if(ok)
    set(MOONCAKE_HIP_PROBE_OK "${key}" CACHE INTERNAL "Inputs of the last HIP probe that built")
  endif()
  set(${result_var} ${ok} PARENT_SCOPE)
  set(${result_var}_LOG "${log}" PARENT_SCOPE)
endfunction()

if(_mc_gpu_mode STREQUAL "OFF")
  set(MOONCAKE_GPU_REASON "MOONCAKE_WITH_GPU=OFF")
else()
  set(_mc_hip_hints)
  foreach(_mc_root "$ENV{HIP_PATH}" "$ENV{ROCM_PATH}")
    if(_mc_root)
      list(APPEND _mc_hip_hints "${_mc_root}/include")
    endif()
  endforeach()
  find_path(MOONCAKE_HIP_INCLUDE_DIR hip/hip_runtime_api.h HINTS ${_mc_hip_hints}
    DOC "Directory holding hip/hip_runtime_api.h (libamdhip64-dev)")

  if(NOT MOONCAKE_HIP_INCLUDE_DIR)
    set(MOONCAKE_GPU_REASON "HIP headers not found (hip/hip_runtime_api.h, from libamdhip64-dev)")
  else()
    # --- NVIDIA: HIP headers + CUDA runtime -----------------------------------
    if(_mc_hip_platform MATCHES "^(AUTO|NVIDIA)$")
      if(NOT CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda/bin/nvcc)
        set(CUDAToolkit_ROOT /usr/local/cuda)
      endif()
      find_package(CUDAToolkit QUIET)
      set(_mc_nv_header ${MOONCAKE_HIP_INCLUDE_DIR}/hip/nvidia_detail/nvidia_hip_runtime_api.h)
      if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart)
        set(MOONCAKE_GPU_REASON "CUDA toolkit not found (set CUDAToolkit_ROOT)")
      elseif(NOT EXISTS ${_mc_nv_header})
        set(MOONCAKE_GPU_REASON "${_mc_nv_header} not found")
      else()
        set(_mc_patched_dir ${CMAKE_BINARY_DIR}/hip_patched)
        mooncake_patch_hip_nvidia_header(${_mc_nv_header}
          ${_mc_patched_dir}/hip/nvidia_detail/nvidia_hip_runtime_api.h)
        # Re-run the patch when the header or the edits change.
        set_property(DIRECTORY ${CMAKE_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
          ${_mc_nv_header} ${CMAKE_CURRENT_LIST_DIR}/PatchHipNvidiaHeader.cmake)
        # The patched folder comes first: hip_runtime_api.h includes
        # "hip/nvidia_detail/nvidia_hip_runtime_api.h" through the include path.
        set(_mc_nv_includes ${_mc_patched_dir} ${MOONCAKE_HIP_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
        _mooncake_hip_probe(_mc_nv_ok __HIP_PLATFORM_NVIDIA__ "${_mc_nv_includes}" CUDA::cudart)
        if(_mc_nv_ok)
          add_library(mooncake_hip INTERFACE)
          target_include_directories(mooncake_hip SYSTEM BEFORE INTERFACE ${_mc_nv_includes})
          target_compile_definitions(mooncake_hip INTERFACE __HIP_PLATFORM_NVIDIA__)
          target_link_libraries(mooncake_hip INTERFACE CUDA::cudart)
          set(MOONCAKE_GPU_ENABLED TRUE)
          set(MOONCAKE_GPU_PLATFORM nvidia)
        else()
          set(MOONCAKE_GPU_REASON "a HIP-on-CUDA ${CUDAToolkit_VERSION} probe program failed to build")
          set(_mc_probe_log "${_mc_nv_ok_LOG}")
        endif()
      endif()
    endif()

    # --- AMD: HIP headers + libamdhip64 ---------------------------------------
    if(NOT MOONCAKE_GPU_ENABLED AND _mc_hip_platform MATCHES "^(AUTO|AMD)$")
      set(_mc_rocm_hints)
      foreach(_mc_root "$ENV{HIP_PATH}" "$ENV{ROCM_PATH}")
        if(_mc_root)
          list(APPEND _mc_rocm_hints "${_mc_root}/lib")
        endif()
      endforeach()
      find_library(MOONCAKE_AMDHIP64_LIBRARY amdhip64 HINTS ${_mc_rocm_hints}
        DOC "HIP runtime for AMD GPUs (libamdhip64)")
      if(NOT MOONCAKE_AMDHIP64_LIBRARY)
        if(_mc_hip_platform STREQUAL "AMD" OR NOT MOONCAKE_GPU_REASON)
          set(MOONCAKE_GPU_REASON "libamdhip64 not found")
        else()
          string(APPEND MOONCAKE_GPU_REASON ", and libamdhip64 not found")
        endif()
      else()
        _mooncake_hip_probe(_mc_amd_ok __HIP_PLATFORM_AMD__ "${MOONCAKE_HIP_INCLUDE_DIR}"
          "${MOONCAKE_AMDHIP64_LIBRARY}")
        if(_mc_amd_ok)
          add_library(mooncake_hip INTERFACE)
          target_include_directories(mooncake_hip SYSTEM INTERFACE ${MOONCAKE_HIP_INCLUDE_DIR})
          target_compile_definitions(mooncake_hip INTERFACE __HIP_PLATFORM_AMD__)
          target_link_libraries(mooncake_hip INTERFACE ${MOONCAKE_AMDHIP64_LIBRARY})
          set(MOONCAKE_GPU_ENABLED TRUE)
          set(MOONCAKE_GPU_PLATFORM amd)
          set(MOONCAKE_GPU_REASON "")
        else()
          set(MOONCAKE_GPU_REASON "a HIP-on-AMD probe program failed to build")
          set(_mc_probe_log "${_mc_amd_ok_LOG}")
        endif()
      endif()
    endif()
  endif()
endif()

if(MOONCAKE_GPU_ENABLED)
  message(STATUS "VRAM tier: enabled (HIP on ${MOONCAKE_GPU_PLATFORM})")
elseif(_mc_gpu_mode STREQUAL "ON")
  message(FATAL_ERROR "MOONCAKE_WITH_GPU=ON but no usable HIP platform: ${MOONCAKE_GPU_REASON}\n"
    "${_mc_probe_log}")
elseif(_mc_probe_log)
  # Headers and runtime were found but do not build: worth a warning.
  message(WARNING "VRAM tier: disabled (${MOONCAKE_GPU_REASON}); configure with "
    "-DMOONCAKE_WITH_GPU=ON to see the compiler output")
else()
  message(STATUS "VRAM tier: disabled (${MOONCAKE_GPU_REASON})")
endif()
