# Whether to build rl-cpp's CUDA kernels, and for which architectures.
#
# rl_cpp_cuda_plan(<mode> <out_build> <out_archs>) sets <out_build> to ON or OFF and
# <out_archs> to a CMAKE_CUDA_ARCHITECTURES value (empty when OFF):
#
# - OFF: never.
# - AUTO (the default): only when a CUDA GPU is visible now (nvidia-smi lists one), for
#   the compute capabilities of the GPUs present ("native" when the driver does not report
#   them). A machine with nvcc but no GPU skips the CUDA build: a first install stays short.
# - ON: always (a wheel for other machines, CI; the caller fails without nvcc), for the
#   GPUs present, or, with none, for every architecture CUDA 13 supports (sm_75 on).
#
# RL_CPP_CUDA_ARCHS, when set, replaces the architectures of AUTO and ON ("native",
# "90-real", "80-real;90"). The probe is the program RL_CPP_NVIDIA_SMI (found on PATH
# unless given, e.g. a fake one in tests).
#
# The decision alone runs in script mode, which is how the tests check it:
#   cmake -DRL_CPP_CUDA=AUTO [-DRL_CPP_NVIDIA_SMI=...] -P cmake/rl_cpp_cuda.cmake
# prints "rl-cpp CUDA plan: build=ON archs=90-real".

# every architecture from sm_75 (CUDA 13's oldest): one cubin per major one, PTX for sm_90
set(RL_CPP_CUDA_ALL_ARCHS "75-real;80-real;86-real;89-real;90")

# The compute capabilities of the visible GPUs ("90-real;80-real"), "native" when
# nvidia-smi lists GPUs without reporting them (an older driver), empty without a GPU.
function(rl_cpp_visible_gpu_archs out)
  set(archs "")
  if(NOT DEFINED RL_CPP_NVIDIA_SMI)
    find_program(RL_CPP_NVIDIA_SMI nvidia-smi)
  endif()
  if(RL_CPP_NVIDIA_SMI)
    execute_process(
      COMMAND "${RL_CPP_NVIDIA_SMI}" --query-gpu=compute_cap --format=csv,noheader
      OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE
      TIMEOUT 60)
    if(rc EQUAL 0 AND caps)
      string(REPLACE "\n" ";" caps "${caps}")
      foreach(cap IN LISTS caps)
        string(STRIP "${cap}" cap)
        if(cap MATCHES "^([0-9]+)\\.([0-9]+)$")
          list(APPEND archs "${CMAKE_MATCH_1}${CMAKE_MATCH_2}-real")
        endif()
      endforeach()
      list(REMOVE_DUPLICATES archs)
    endif()
    if(NOT archs)
      execute_process(
        COMMAND "${RL_CPP_NVIDIA_SMI}" -L
        OUTPUT_VARIABLE listed RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 60)
      if(rc EQUAL 0 AND listed MATCHES "GPU [0-9]+:")
        if(CMAKE_VERSION VERSION_LESS 3.24)  # no "native" before CMake 3.24
          set(archs "${RL_CPP_CUDA_ALL_ARCHS}")
        else()
          set(archs "native")
        endif()
      endif()
    endif()
  endif()
  set(${out} "${archs}" PARENT_SCOPE)
endfunction()

function(rl_cpp_cuda_plan given out_build out_archs)
  string(TOUPPER "${given}" mode)
  if(NOT mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "RL_CPP_CUDA must be AUTO, ON or OFF, got '${given}'")
  endif()
  set(build OFF)
  set(archs "")
  if(NOT mode STREQUAL "OFF")
    rl_cpp_visible_gpu_archs(gpu_archs)
    if(mode STREQUAL "ON" OR gpu_archs)
      set(build ON)
      if(RL_CPP_CUDA_ARCHS)
        set(archs "${RL_CPP_CUDA_ARCHS}")
      elseif(gpu_archs)
        set(archs "${gpu_archs}")
      else()
        set(archs "${RL_CPP_CUDA_ALL_ARCHS}")
      endif()
    endif()
  endif()
  set(${out_build} ${build} PARENT_SCOPE)
  set(${out_archs} "${archs}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT DEFINED RL_CPP_CUDA)
    set(RL_CPP_CUDA AUTO)
  endif()
  rl_cpp_cuda_plan("${RL_CPP_CUDA}" build archs)
  message("rl-cpp CUDA plan: build=${build} archs=${archs}")
endif()
