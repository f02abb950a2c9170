# A private PostgreSQL for tests, benchmarks and demos: initdb into a
# directory of its own, started on a free port with its socket in that
# directory (no TCP listener), fsync and synchronous_commit on. Source it
# after scripts/lib/common.sh; it defines functions only.
#
#   url=$(pg_start DIR [name=value ...])   # prints the libpq connection string
#   pg_stop DIR
#
# PostgreSQL refuses to run as root: as root, the server runs as the
# `postgres` system user the Debian package creates, and DIR is given to it.

pg_bindir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

# Runs a PostgreSQL program as the user the server runs as.
pg_as() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pg_start() {
  local dir=$1
  shift
  if [ -z "$(pg_bindir)" ] || ! id postgres >/dev/null 2>&1; then
    ensure_packages postgresql-15 >&2
  fi
  local bin
  bin=$(pg_bindir)
  mkdir -p "$dir"
  chmod 700 "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
  if ! pg_as "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync \
    >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    return 1
  fi
  local port opts s
  port=$(pg_free_port)
  opts="-p $port -k $dir -c listen_addresses='' -c fsync=on -c synchronous_commit=on"
  opts+=" -c max_connections=400 -c shared_buffers=128MB"
  for s in "$@"; do opts+=" -c $s"; done
  if ! pg_as "$bin/pg_ctl" -D "$dir/data" -o "$opts" -l "$dir/postgres.log" -w -t 60 start \
    >/dev/null; then
    cat "$dir/postgres.log" >&2
    return 1
  fi
  echo "host=$dir port=$port user=postgres dbname=postgres"
}

pg_stop() {
  local dir=$1
  [ -d "$dir/data" ] || return 0
  pg_as "$(pg_bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
}
