# shellcheck shell=bash
# Sourced by tests/run and bench/run. Defines weft_ensure_deps: makes sure the
# Debian packages the project builds and tests with are installed. Quiet when
# they all are; installs the missing ones when run as root; otherwise names
# them and the command to install them, and fails.

weft_required_packages=(
  clang-19 libclang-rt-19-dev g++-12 cmake ninja-build pkg-config python3
  catch2 libhwloc-dev libtbb-dev libomp-19-dev libasio-dev liburing-dev
  libboost-context-dev
)

weft_ensure_deps() {
  local missing=() pkg status
  for pkg in "${weft_required_packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return 0

  if [[ $(id -u) -eq 0 ]]; then
    echo "weft: installing missing packages: ${missing[*]}" >&2
    apt-get update &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" ||
      { echo "weft: installing ${missing[*]} failed" >&2; exit 1; }
    return 0
  fi

  {
    echo "weft: missing Debian packages: ${missing[*]}"
    echo "install them as root with:"
    echo "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
  } >&2
  exit 1
}
