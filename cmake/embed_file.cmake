# cmake -DIN=file -DOUT=header.h -DNAME=kSymbol -P embed_file.cmake
# Writes OUT: `inline constexpr unsigned char NAME[] = {...};` with the bytes of IN (no NUL added).
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
if(bytes STREQUAL "")
  set(bytes "0x00,")  # an empty file still gives a valid array (one NUL byte)
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by cmake/embed_file.cmake. Do not edit.\n#pragma once\ninline constexpr unsigned char ${NAME}[] = {\n${bytes}};\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
