# Shared by scripts/*: install what is missing (Debian 12), configure, build.
# Source it; it defines functions only.

OPGATE_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  librocksdb-dev libprotobuf-dev protobuf-compiler
  libssl-dev libfmt-dev libspdlog-dev libtoml11-dev libcli11-dev doctest-dev
  python3 curl openssl
  libsystemd-dev libcbor-dev
  libpq-dev postgresql-15
)

ensure_packages() {
  local missing=() p
  for p in "${OPGATE_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "==> installing missing packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# build DIR BUILD_TYPE [extra cmake args...]; OPGATE_BUILD_TARGET limits the build.
build() {
  local dir=$1 type=$2
  shift 2
  local jobs
  jobs=$(nproc)
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" "$@" >/dev/null
  fi
  # ccache caches what uses a precompiled header only with this sloppiness.
  CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime} \
    cmake --build "$dir" -j "$jobs" ${OPGATE_BUILD_TARGET:+--target "$OPGATE_BUILD_TARGET"}
}
