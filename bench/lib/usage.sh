# Sourced by every bench script before anything else: with -h or --help among the script's
# arguments it prints the script's header comment, then the options of the Python it runs (if
# any), and exits — before any package is installed or anything is built.
# usage_on_help SCRIPT [PYTHON_SCRIPT] ARGS...
usage_on_help() {
  local self=$1 py=$2
  shift 2
  local a
  for a in "$@"; do
    if [[ $a == -h || $a == --help ]]; then
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$self"
      if [[ -n $py ]]; then
        echo
        python3 "$py" --help
      fi
      exit 0
    fi
  done
}
