#!/bin/sh
# embed_text.sh NAME FILE: FILE as a C file defining `const char NAME[]`, one string literal
# per line with backslashes and double quotes escaped (the dashboard page, ps/BUILD).
set -eu
echo "const char $1[] ="
sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$/\\n"/' "$2"
echo ";"
