#!/usr/bin/env bash
# Lists function lengths (lines, from the signature to the closing brace) in the given files,
# longest first, via Universal Ctags' end: field (lambdas are left out: they count in the
# function that holds them). Usage: scripts/function_lengths.sh FILE... | head
set -euo pipefail
command -v ctags >/dev/null || { echo "function_lengths.sh: needs Universal Ctags (apt-get install universal-ctags)" >&2; exit 1; }
ctags --fields=+ne --kinds-c++=f -o - --sort=no "$@" 2>/dev/null |
  awk -F'\t' '{
    line=""; end=""; scope="";
    for (i = 4; i <= NF; i++) {
      if ($i ~ /^line:/) line = substr($i, 6);
      if ($i ~ /^end:/) end = substr($i, 5);
      if ($i ~ /^(class|struct|function|namespace):/) scope = $i;
    }
    if (line != "" && end != "" && $1 !~ /^__anon/) printf "%5d %s:%s %s (%s)\n", end - line + 1, $2, line, $1, scope
  }' | sort -rn
