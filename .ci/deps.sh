# shellcheck shell=bash
# Sourced by tests/run and bench/run. Defines weft_ensure_deps [extra...]: makes
# sure the Debian packages the project builds and tests with (and the extra ones
# named, such as bench/run's nginx) are installed. Quiet when they all are;
# installs the missing ones when run as root; otherwise names them and the
# command to install them, and fails. Installing never starts a service: a
# package's own service (nginx's) is kept from starting by a policy-rc.d for the
# duration of the install; bench/http starts nginx itself, with its own config.

weft_required_packages=(
  clang-19 libclang-rt-19-dev g++-12 cmake ninja-build pkg-config python3
  catch2 libhwloc-dev libtbb-dev libomp-19-dev libasio-dev liburing-dev
  libboost-context-dev libssl-dev wrk
)

weft_ensure_deps() {
  local missing=() pkg status
  for pkg in "${weft_required_packages[@]}" "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return 0

  if [[ $(id -u) -eq 0 ]]; then
    echo "weft: installing missing packages: ${missing[*]}" >&2
    local policy=/usr/sbin/policy-rc.d own_policy=0 rc=0
    if [[ ! -e $policy ]]; then
      printf '#!/bin/sh\n# weft: no service starts while packages are installed\nexit 101\n' >"$policy"
      chmod +x "$policy"
      own_policy=1
    fi
    apt-get update &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" || rc=1
    ((own_policy)) && rm -f "$policy"
    ((rc == 0)) || { echo "weft: installing ${missing[*]} failed" >&2; exit 1; }
    return 0
  fi

  {
    echo "weft: missing Debian packages: ${missing[*]}"
    echo "install them as root with:"
    echo "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
  } >&2
  exit 1
}
