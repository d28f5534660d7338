# trident_warnings(<target>): the project's warnings on a target's own code, for the host compiler
# and, through -Xcompiler, for the host side of nvcc's .cu files. TRIDENT_WERROR=ON (CI) makes
# them errors (nvcc's own diagnostics included); vendor headers come in as system headers (the
# imported targets), so their warnings never count.
function(trident_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  if(TRIDENT_WERROR)
    set_target_properties(${target} PROPERTIES COMPILE_WARNING_AS_ERROR ON)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror>)
  endif()
endfunction()
