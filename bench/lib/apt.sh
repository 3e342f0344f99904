# Sourced by bench/deps.sh and bench/deps-registrar.sh: Debian packages installed only when missing,
# and before anything is installed the list of them, each with why the benchmark needs it.
# need PACKAGE WHAT WHY: PACKAGE is wanted unless WHAT (a path, or a command name) is present.
missing=() reasons=()
need() {
  if [[ $2 == /* ]]; then [[ -e $2 ]] && return; else command -v "$2" >/dev/null && return; fi
  missing+=("$1")
  reasons+=("$1: $3 ($2 is missing)")
}

# install_missing SCRIPT: does nothing when every package is present; otherwise says what it will
# install and why, then runs apt-get (through sudo unless root).
install_missing() {
  ((${#missing[@]})) || return 0
  echo "$1: apt-get install --no-install-recommends ${missing[*]}"
  printf '  %s\n' "${reasons[@]}"
  local sudo=""
  ((EUID == 0)) || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
