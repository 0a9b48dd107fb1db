# Which GPU code each CUDA source of the backend is compiled into.
#
# OPTIMATE_CUDA_ARCHS lists the compute capabilities a build serves (80 A100, 86 A10 and RTX
# 30xx, 89 L4, L40S and RTX 40xx, 90a H100 and H200; a list of one narrows a build to that GPU).
# A cubin built for X.y runs on every X.z with z >= y, so each source gets, per major version,
# the cubin of the lowest listed capability, and a higher one only where its kernels use that
# one's instructions:
#   - portable sources: the lowest of each major (sm_80 serves 8.0, 8.6 and 8.9); Hopper's as
#     sm_90, since none of them uses a 90a instruction (the same SASS as 90a);
#   - FP8 sources (kernels that convert e4m3, which 8.9 does in one instruction and 8.0 only by
#     emulation): sm_89 as well, where 89 is listed;
#   - Hopper sources (thread-block clusters, distributed shared memory): the listed 9.x and later
#     only, as listed; never an 8.x cubin (kernel_paths.h keeps those GPUs off these kernels);
# and every source the PTX of the newest listed capability (without its 'a'), which GPUs newer
# than the list compile at load.
set(OPTIMATE_CUDA_ARCHS "80;86;89;90a" CACHE STRING
    "compute capabilities the CUDA backend serves, e.g. 80;86;89;90a (90a: Hopper)")

set(OPTIMATE_CUDA_FP8_SOURCES activation.cu fp8_quantize.cu gemv.cu gemv_mma.cu kv_cache_write.cu
    kv_requantize.cu moe_gemm.cu paged_attention.cu paged_attention_tc.cu prefill_attention.cu rmsnorm.cu rope_kv_write.cu)
set(OPTIMATE_CUDA_HOPPER_SOURCES paged_attention_heads.cu)

# Sets <prefix>_PORTABLE, <prefix>_FP8 and <prefix>_HOPPER to nvcc -gencode flags.
function(optimate_cuda_gencode_sets prefix)
  set(nums "")
  foreach(entry IN LISTS OPTIMATE_CUDA_ARCHS)
    if(NOT entry MATCHES "^([0-9]+)(a?)$")
      message(FATAL_ERROR "OPTIMATE_CUDA_ARCHS: '${entry}' is not a compute capability such as 80, 86, 89 or 90a")
    endif()
    if(CMAKE_MATCH_1 LESS 80)
      message(FATAL_ERROR "OPTIMATE_CUDA_ARCHS: ${entry} is below 80; the CUDA backend needs compute capability 8.0")
    endif()
    list(APPEND nums ${CMAKE_MATCH_1})
    set(suffix_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
  endforeach()
  if(NOT nums)
    message(FATAL_ERROR "OPTIMATE_CUDA_ARCHS is empty")
  endif()
  list(SORT nums COMPARE NATURAL)
  list(REMOVE_DUPLICATES nums)
  list(GET nums -1 newest)

  set(portable "")
  set(hopper "")
  set(major_seen "")
  foreach(n IN LISTS nums)
    math(EXPR major "${n} / 10")
    if(NOT major IN_LIST major_seen)
      list(APPEND major_seen ${major})
      list(APPEND portable ${n})
    endif()
    if(n GREATER_EQUAL 90)
      list(APPEND hopper "${n}${suffix_${n}}")
    endif()
  endforeach()
  set(fp8 ${portable})
  if(89 IN_LIST nums AND NOT 89 IN_LIST portable)
    list(APPEND fp8 89)
  endif()
  # A build without Hopper still compiles the Hopper sources, as PTX alone, so they link.
  if(newest LESS 90)
    set(hopper_ptx 90)
  else()
    set(hopper_ptx ${newest})
  endif()

  foreach(set_name portable fp8 hopper)
    set(flags "")
    set(ptx ${newest})
    if(set_name STREQUAL "hopper")
      set(ptx ${hopper_ptx})
    endif()
    foreach(arch IN LISTS ${set_name})
      if(arch STREQUAL ptx)  # one front-end pass gives the cubin and the PTX
        list(APPEND flags "--generate-code=arch=compute_${arch},code=[sm_${arch},compute_${arch}]")
        set(ptx "")
      else()
        list(APPEND flags "--generate-code=arch=compute_${arch},code=[sm_${arch}]")
      endif()
    endforeach()
    if(ptx)
      list(APPEND flags "--generate-code=arch=compute_${ptx},code=[compute_${ptx}]")
    endif()
    string(TOUPPER ${set_name} upper)
    set(${prefix}_${upper} "${flags}" PARENT_SCOPE)
  endforeach()
endfunction()

# Gives each CUDA source of `target` its flags; the target itself then passes none.
function(optimate_cuda_set_archs target sources)
  optimate_cuda_gencode_sets(_gencode)
  set_property(TARGET ${target} PROPERTY CUDA_ARCHITECTURES OFF)
  foreach(src IN LISTS sources)
    if(NOT src MATCHES "\\.cu$")
      continue()
    endif()
    get_filename_component(name ${src} NAME)
    if(name IN_LIST OPTIMATE_CUDA_HOPPER_SOURCES)
      set(flags ${_gencode_HOPPER})
    elseif(name IN_LIST OPTIMATE_CUDA_FP8_SOURCES)
      set(flags ${_gencode_FP8})
    else()
      set(flags ${_gencode_PORTABLE})
    endif()
    set_source_files_properties(${src} TARGET_DIRECTORY ${target} PROPERTIES COMPILE_OPTIONS "${flags}")
  endforeach()
endfunction()

# The list the build was made for, for the start-up log and the error on a GPU it does not serve
# (device_kernel_paths.cpp).
function(optimate_cuda_record_archs target)
  optimate_cuda_gencode_sets(_gencode)
  string(REPLACE ";" "," built "${OPTIMATE_CUDA_ARCHS}")
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backend/cuda/device_kernel_paths.cpp TARGET_DIRECTORY ${target}
               APPEND PROPERTY COMPILE_DEFINITIONS OPTIMATE_CUDA_ARCHS_BUILT="${built}")
  message(STATUS "CUDA architectures (OPTIMATE_CUDA_ARCHS=${OPTIMATE_CUDA_ARCHS}): portable sources "
                 "${_gencode_PORTABLE}; FP8 sources ${_gencode_FP8}; Hopper sources ${_gencode_HOPPER}")
endfunction()
