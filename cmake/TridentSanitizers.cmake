# TRIDENT_SANITIZE=address,undefined | thread: every Trident target is compiled and linked with
# the sanitizers (CMakePresets.json: asan-ubsan, tsan). The library's exported targets carry the
# link flag, so a program linking an instrumented Trident links the sanitizer runtime too.
set(TRIDENT_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined or thread (empty: none)")
if(TRIDENT_SANITIZE)
  # Any UBSan finding stops the program (a test then fails) instead of printing and going on.
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${TRIDENT_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${TRIDENT_SANITIZE})
  message(STATUS "Trident: sanitizers ${TRIDENT_SANITIZE}")
endif()

# trident_sanitizer_link(<target>): the sanitizer runtime for users of an installed <target>.
function(trident_sanitizer_link target)
  if(TRIDENT_SANITIZE)
    target_link_options(${target} INTERFACE -fsanitize=${TRIDENT_SANITIZE})
  endif()
endfunction()
