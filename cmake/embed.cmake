# Writes a C file holding the bytes of a file: cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# Used for the chat page (web/), so the binary serves it with no files beside it.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n_hex)
math(EXPR n "${n_hex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* generated from ${IN} by cmake/embed.cmake; do not edit */\n#include <stddef.h>\n"
     "const unsigned char ${NAME}[] = {\n${bytes}0x00};\nconst size_t ${NAME}_len = ${n};\n")
