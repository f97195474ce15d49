#!/bin/sh
# Dependencies point down the stack (STYLE.md rule 2): a module may include its own folder and
# folders of a lower rank, never one above it. Prints each violation; exits 1 if there is any.
set -eu
cd "$(dirname "$0")/.."
rank() {
    case $1 in
        base) echo 0 ;; tensor) echo 1 ;; format) echo 2 ;;
        tokenizer|template|backend) echo 3 ;; sample|model|kv) echo 4 ;; engine) echo 5 ;;
        api|serve) echo 6 ;; cli) echo 7 ;; *) echo 99 ;;
    esac
}
bad=0
for f in $(find src -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh'); do
    from=$(echo "$f" | cut -d/ -f2)
    rf=$(rank "$from")
    for inc in $(grep -o '^#include "[a-z_]*/' "$f" | sed 's/#include "//; s#/##'); do
        [ "$inc" = "$from" ] && continue
        ri=$(rank "$inc")
        if [ "$ri" -ge "$rf" ]; then
            echo "$f includes $inc/ (rank $ri) from $from/ (rank $rf): upward or sideways"
            bad=1
        fi
    done
done
exit $bad
