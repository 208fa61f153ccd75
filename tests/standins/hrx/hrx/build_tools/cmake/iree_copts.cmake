# Every target: -Wall, and -Werror unless IREE_ENABLE_WERROR_FLAG is OFF.
if(CMAKE_C_COMPILER_ID MATCHES "Clang|GNU")
  add_compile_options(-Wall)
  if(IREE_ENABLE_WERROR_FLAG)
    add_compile_options(-Werror)
  endif()
endif()
