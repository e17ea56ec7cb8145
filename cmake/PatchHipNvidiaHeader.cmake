# Writes a copy of HIP 5.2's hip/nvidia_detail/nvidia_hip_runtime_api.h that
# compiles against CUDA 12/13 (host code, g++). HIP 5.2 was written for
# CUDA 11; since then:
#   - CUDA 12.0 removed texture references (cudaBindTexture,
#     cudaBindTexture2D, cudaGetTextureAlignmentOffset) and
#     cudaLaunchCooperativeKernelMultiDevice;
#   - CUDA 13.0 removed cudaDeviceProp::{clockRate, memoryClockRate,
#     computeMode, kernelExecTimeoutEnabled, cooperativeMultiDeviceLaunch} and
#     cudaDevAttrCooperativeMultiDeviceLaunch, made cudaMemAdvise /
#     cudaMemPrefetchAsync take a cudaMemLocation (prefetch also flags) and
#     mapped cuCtxCreate to cuCtxCreate_v4(ctx, params, flags, dev).
# Every edit is an exact text replacement whose expected number of matches is
# checked: if the installed header differs from the one these edits were
# written for, configuration stops instead of producing a half-patched header.
# Replacements that depend on an API signature keep the original text for
# older CUDA behind CUDART_VERSION / CUDA_VERSION guards; the others (removed
# features) are correct on every CUDA version.
#
# Use: include() this file and call
#   mooncake_patch_hip_nvidia_header(<input header> <output header>)
# or run it as a script:
#   cmake -DINPUT=<in> -DOUTPUT=<out> -P PatchHipNvidiaHeader.cmake
# The output is rewritten only when its content changes, so reconfiguring does
# not trigger rebuilds.

# Replaces `old` by `new` in the variable named by `var`; stops unless `old`
# occurs exactly `expected` times.
function(_mooncake_hip_edit var expected old new)
  set(text "${${var}}")
  string(LENGTH "${text}" len_before)
  string(LENGTH "${old}" len_old)
  string(REPLACE "${old}" "" stripped "${text}")
  string(LENGTH "${stripped}" len_after)
  math(EXPR count "(${len_before} - ${len_after}) / ${len_old}")
  if(NOT count EQUAL expected)
    message(FATAL_ERROR
      "HIP NVIDIA header patch: expected ${expected} occurrence(s) of\n---\n${old}\n---\n"
      "in ${_MOONCAKE_HIP_PATCH_INPUT}, found ${count}. The installed HIP headers differ from "
      "HIP 5.2.3, which cmake/PatchHipNvidiaHeader.cmake was written for: update the edits, "
      "or configure with -DMOONCAKE_WITH_GPU=OFF.")
  endif()
  string(REPLACE "${old}" "${new}" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

function(mooncake_patch_hip_nvidia_header input output)
  set(_MOONCAKE_HIP_PATCH_INPUT "${input}")
  if(NOT EXISTS "${input}")
    message(FATAL_ERROR "HIP NVIDIA header patch: ${input} does not exist")
  endif()
  file(READ "${input}" h)

  # 1. cudaMemAdvise takes a cudaMemLocation since CUDA 13.
  _mooncake_hip_edit(h 1
"    return hipCUDAErrorTohipError(cudaMemAdvise(dev_ptr, count,
        hipMemoryAdviseTocudaMemoryAdvise(advice), device));"
"#if CUDART_VERSION >= 13000
    struct cudaMemLocation location = {};
    location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    location.id = device;
    return hipCUDAErrorTohipError(cudaMemAdvise(dev_ptr, count,
        hipMemoryAdviseTocudaMemoryAdvise(advice), location));
#else
    return hipCUDAErrorTohipError(cudaMemAdvise(dev_ptr, count,
        hipMemoryAdviseTocudaMemoryAdvise(advice), device));
#endif")

  # 2. cudaMemPrefetchAsync takes (location, flags, stream) since CUDA 13.
  _mooncake_hip_edit(h 1
"    return hipCUDAErrorTohipError(cudaMemPrefetchAsync(dev_ptr, count, device, stream));"
"#if CUDART_VERSION >= 13000
    struct cudaMemLocation location = {};
    location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    location.id = device;
    return hipCUDAErrorTohipError(cudaMemPrefetchAsync(dev_ptr, count, location, 0, stream));
#else
    return hipCUDAErrorTohipError(cudaMemPrefetchAsync(dev_ptr, count, device, stream));
#endif")

  # 3. hipChooseDevice: the removed cudaDeviceProp fields cannot be matched on.
  _mooncake_hip_edit(h 1 "    cdprop.clockRate = prop->clockRate;\n" "")
  _mooncake_hip_edit(h 1 "    cdprop.computeMode = prop->computeMode;\n" "")
  _mooncake_hip_edit(h 1 "    cdprop.memoryClockRate = prop->memoryClockRate;\n" "")

  # 4. hipGetDeviceProperties: read the removed fields as device attributes.
  _mooncake_hip_edit(h 1
"    p_prop->clockRate = cdprop.clockRate;
    p_prop->memoryClockRate = cdprop.memoryClockRate;"
"    {
        int value = 0;
        if (cudaDeviceGetAttribute(&value, cudaDevAttrClockRate, device) != cudaSuccess) value = 0;
        p_prop->clockRate = value;
        value = 0;
        if (cudaDeviceGetAttribute(&value, cudaDevAttrMemoryClockRate, device) != cudaSuccess) value = 0;
        p_prop->memoryClockRate = value;
    }")
  _mooncake_hip_edit(h 1
"    p_prop->computeMode = cdprop.computeMode;
    p_prop->clockInstructionRate = cdprop.clockRate; // Same as clock-rate:"
"    {
        int value = 0;
        if (cudaDeviceGetAttribute(&value, cudaDevAttrComputeMode, device) != cudaSuccess) value = 0;
        p_prop->computeMode = value;
    }
    p_prop->clockInstructionRate = p_prop->clockRate; // Same as clock-rate:")
  _mooncake_hip_edit(h 1
"    p_prop->cooperativeMultiDeviceLaunch = cdprop.cooperativeMultiDeviceLaunch;"
"    p_prop->cooperativeMultiDeviceLaunch = 0; // removed in CUDA 12")
  _mooncake_hip_edit(h 1
"    p_prop->kernelExecTimeoutEnabled = cdprop.kernelExecTimeoutEnabled;"
"    {
        int value = 0;
        if (cudaDeviceGetAttribute(&value, cudaDevAttrKernelExecTimeout, device) != cudaSuccess) value = 0;
        p_prop->kernelExecTimeoutEnabled = value;
    }")

  # 5. hipDeviceGetAttribute: multi-device cooperative launch no longer exists.
  _mooncake_hip_edit(h 1
"        case hipDeviceAttributeCooperativeMultiDeviceLaunch:
            cdattr = cudaDevAttrCooperativeMultiDeviceLaunch;
            break;"
"        case hipDeviceAttributeCooperativeMultiDeviceLaunch:
            *pi = 0; // removed in CUDA 12
            return hipSuccess;")

  # 6. cuCtxCreate is cuCtxCreate_v4(ctx, params, flags, dev) since CUDA 13.
  _mooncake_hip_edit(h 1
"    return hipCUResultTohipError(cuCtxCreate(ctx, flags, device));"
"#if CUDA_VERSION >= 13000
    return hipCUResultTohipError(cuCtxCreate(ctx, NULL, flags, device));
#else
    return hipCUResultTohipError(cuCtxCreate(ctx, flags, device));
#endif")

  # 7. Texture references and multi-device cooperative launch were removed in
  #    CUDA 12.
  #    (The template overloads further down sit inside #ifdef __CUDACC__ and
  #    are left alone: this header is only compiled by the host compiler.)
  _mooncake_hip_edit(h 1
"                                                         size_t size __dparm(UINT_MAX)) {
    return hipCUDAErrorTohipError(cudaBindTexture(offset, tex, devPtr, desc, size));"
"                                                         size_t size __dparm(UINT_MAX)) {
    (void)offset; (void)tex; (void)devPtr; (void)desc; (void)size;
    return hipErrorNotSupported; // texture references were removed in CUDA 12")
  _mooncake_hip_edit(h 1
"    return hipCUDAErrorTohipError(cudaBindTexture2D(offset, tex, devPtr, desc, width, height, pitch));"
"    (void)offset; (void)tex; (void)devPtr; (void)desc; (void)width; (void)height; (void)pitch;
    return hipErrorNotSupported; // texture references were removed in CUDA 12")
  _mooncake_hip_edit(h 1
"    return hipCUDAErrorTohipError(cudaGetTextureAlignmentOffset(offset,texref));"
"    (void)offset; (void)texref;
    return hipErrorNotSupported; // texture references were removed in CUDA 12")
  _mooncake_hip_edit(h 1
"    return hipCUDAErrorTohipError(cudaLaunchCooperativeKernelMultiDevice(launchParamsList, numDevices, flags));"
"    (void)launchParamsList; (void)numDevices; (void)flags;
    return hipErrorNotSupported; // removed in CUDA 12")

  set(h "// Generated by cmake/PatchHipNvidiaHeader.cmake from\n// ${input}\n// (HIP 5.2 adapted to CUDA 12/13). Do not edit.\n${h}")
  if(EXISTS "${output}")
    file(READ "${output}" old_output)
    if(old_output STREQUAL h)
      return()
    endif()
  endif()
  file(WRITE "${output}" "${h}")
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND NOT CMAKE_PARENT_LIST_FILE)
  if(NOT DEFINED INPUT OR NOT DEFINED OUTPUT)
    message(FATAL_ERROR "usage: cmake -DINPUT=<header> -DOUTPUT=<header> -P ${CMAKE_CURRENT_LIST_FILE}")
  endif()
  mooncake_patch_hip_nvidia_header("${INPUT}" "${OUTPUT}")
endif()
