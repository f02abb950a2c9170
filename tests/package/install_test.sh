#!/usr/bin/env bash
# The fresh-root install test: installs the Debian package on a new, minimal
# Debian 12 root (debootstrap --variant=minbase) with apt, as an
# administrator would, and checks what the installation left behind:
#   - `opgate --version` names the package's version;
#   - the opgate system user and group, /var/lib/opgate 0700 opgate:opgate,
#     /etc/opgate/opgate.env 0640 root:opgate;
#   - /etc/opgate/opgate.toml and opgate.env are conffiles;
#   - `systemd-analyze verify` accepts the unit (run inside the root);
#   - the alert rules and the dashboard are under /usr/share/opgate, the
#     README and the manuals it links to under /usr/share/doc/opgate;
#   - the installed config starts the daemon as user opgate: first refused
#     while opgate.env still holds only placeholders, then, with test secrets
#     in opgate.env, it answers /healthz, /readyz and /metrics on 127.0.0.1
#     and exits 0 on SIGTERM;
#   - booted with systemd (systemd-nspawn, its own network namespace), the
#     unit as installed starts the daemon (Type=notify: active, with its
#     ports as status), /healthz answers, and a stop drains and exits 0;
#   - a purge keeps the data and the user, and removes the conffiles.
#
# Usage: tests/package/install_test.sh [opgate_VERSION_ARCH.deb]
# (default: the one ./scripts/package left in build/);
# OPGATE_INSTALL_TEST_KEEP=1 keeps the root for a look. Needs root,
# debootstrap and the Debian mirror this machine's apt uses; without root or
# debootstrap it prints SKIP and exits 0, except when CI=true, where it fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."

skip() {
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: install test cannot run in CI: $*" >&2
    exit 1
  fi
  echo "SKIP: install test: $*"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (apt-get install debootstrap)"
command -v systemd-nspawn >/dev/null ||
  skip "systemd-nspawn is not installed (apt-get install systemd-container)"
command -v curl >/dev/null || skip "curl is not installed"

deb=${1:-}
if [ -z "$deb" ]; then
  deb=$(ls -t build/opgate_*.deb 2>/dev/null | head -n 1 || true)
  [ -n "$deb" ] || {
    echo "no package: run ./scripts/package first, or pass the .deb" >&2
    exit 1
  }
fi
deb=$(readlink -f "$deb")
version=$(dpkg-deb -f "$deb" Version)

started=$(date +%s)
phase_name=""
phase_start=$started
timings=""
phase() {  # NAME: starts a phase, ending the one before; "" ends the last
  local now
  now=$(date +%s)
  [ -z "$phase_name" ] || timings+="${timings:+, }$phase_name $((now - phase_start)) s"
  phase_name=$1
  phase_start=$now
  [ -z "$1" ] || echo "==> $1"
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# This machine's Debian sources (one-line and deb822), for bookworm and its
# -updates and -security suites; third-party repositories are left out.
debian_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" && $0 !~ /\[/ && $3 ~ /^bookworm(-updates|-security)?$/ {
      line = "deb " $2 " " $3; for (i = 4; i <= NF; i++) line = line " " $i; print line }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'function flush() {
           if (types ~ /(^| )deb( |$)/ && enabled != "no")
             for (u = 1; u <= nu; u++) for (s = 1; s <= ns; s++)
               if (suites[s] ~ /^bookworm(-updates|-security)?$/) print "deb " uris[u] " " suites[s] " " comps
           types = ""; enabled = ""; comps = ""; nu = 0; ns = 0 }
         /^[ \t]*$/ { flush(); next }
         /^#/ { next }
         tolower($1) == "types:" { types = $0; sub(/^[^:]*:[ \t]*/, "", types) }
         tolower($1) == "enabled:" { enabled = tolower($2) }
         tolower($1) == "uris:" { nu = split(substr($0, index($0, ":") + 1), uris, " ") }
         tolower($1) == "suites:" { ns = split(substr($0, index($0, ":") + 1), suites, " ") }
         tolower($1) == "components:" { comps = $0; sub(/^[^:]*:[ \t]*/, "", comps) }
         END { flush() }' "$f"
  done
}
sources=$(debian_sources | awk '!seen[$0]++')
mirror=$(awk '$3 == "bookworm" { print $2; exit }' <<<"$sources")
mirror=${mirror:-http://deb.debian.org/debian}
[ -n "$sources" ] || sources="deb $mirror bookworm main"

work=$(mktemp -d /var/tmp/opgate-install-test.XXXXXX)
root=$work/root
daemon_pid=""
cleanup() {
  local rc=$?
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -KILL "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  for m in "$root/proc"; do
    if mountpoint -q "$m" 2>/dev/null; then umount "$m" || umount -l "$m" || true; fi
  done
  if grep -q " $root/" /proc/mounts; then
    echo "install test: something is still mounted under $root; leaving $work in place" >&2
  elif [ "${OPGATE_INSTALL_TEST_KEEP:-}" = 1 ]; then
    echo "install test: kept $work (OPGATE_INSTALL_TEST_KEEP=1)"
  else
    rm -rf --one-file-system "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
in_root() {  # runs a command inside the root with a clean environment
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}

echo "install test: $(basename "$deb") on a fresh Debian 12 root (minbase + systemd) from $mirror"
phase debootstrap
# Downloaded packages are kept outside the repository for the next run.
cache=/var/cache/opgate-install-test/debootstrap
mkdir -p "$cache"
if ! debootstrap --variant=minbase --include=systemd --cache-dir="$cache" bookworm "$root" \
  "$mirror" >"$work/debootstrap.log" 2>&1; then
  tail -n 30 "$work/debootstrap.log" >&2
  fail "debootstrap failed"
fi
# What every installed machine has, and apt's sources.
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
printf '%s\n' "$sources" >"$root/etc/apt/sources.list"
mount -t proc proc "$root/proc"
cp "$deb" "$root/tmp/"

phase "apt-get install"
in_root apt-get update -qq >"$work/apt.log" 2>&1 || {
  cat "$work/apt.log" >&2
  fail "apt-get update failed in the root"
}
if ! in_root sh -c "cd /tmp && apt-get install -y ./$(basename "$deb")" >>"$work/apt.log" 2>&1; then
  tail -n 40 "$work/apt.log" >&2
  fail "apt-get install of the package failed"
fi

phase "checks"
check() {  # DESCRIPTION: prints it; the caller has already tested
  echo "  ok: $*"
}
out=$(in_root opgate --version)
[[ "$out" =~ ^opgate\ ${version//./\\.}\ \(.+\)$ ]] || fail "opgate --version printed '$out'"
check "opgate --version: $out"
[ -x "$root/usr/bin/opgate-sim" ] || fail "/usr/bin/opgate-sim is missing"
check "/usr/bin/opgate and /usr/bin/opgate-sim"

passwd=$(in_root getent passwd opgate) || fail "no user opgate"
IFS=: read -r _ _ uid gid _ home shell <<<"$passwd"
[ "$(in_root getent group opgate | cut -d: -f3)" = "$gid" ] || fail "user opgate is not in group opgate"
[ "$home" = /var/lib/opgate ] || fail "opgate's home is $home"
[ "$uid" -lt 1000 ] || fail "opgate is not a system user (uid $uid)"
check "system user and group opgate ($uid:$gid, home $home, shell $shell)"

for f in /etc/opgate/opgate.toml /etc/opgate/opgate.env; do
  grep -qx "$f" "$root/var/lib/dpkg/info/opgate.conffiles" || fail "$f is not a conffile"
done
check "conffiles: $(tr '\n' ' ' <"$root/var/lib/dpkg/info/opgate.conffiles")"
[ "$(in_root stat -c '%U:%G %a' /var/lib/opgate)" = "opgate:opgate 700" ] ||
  fail "/var/lib/opgate is $(in_root stat -c '%U:%G %a' /var/lib/opgate)"
check "/var/lib/opgate opgate:opgate 0700"
[ "$(in_root stat -c '%U:%G %a' /var/backups/opgate)" = "opgate:opgate 700" ] ||
  fail "/var/backups/opgate is $(in_root stat -c '%U:%G %a' /var/backups/opgate)"
check "/var/backups/opgate opgate:opgate 0700"
for f in /etc/opgate/opgate.env /etc/opgate/opgate.toml; do
  [ "$(in_root stat -c '%U:%G %a' "$f")" = "root:opgate 640" ] ||
    fail "$f is $(in_root stat -c '%U:%G %a' "$f")"
done
check "/etc/opgate/opgate.env and opgate.toml root:opgate 0640"
for v in OPGATE_AGENTS_WEBHOOK_SECRETS OPENAI_API_KEY OPGATE_PAYMENTS_SECRET_KEY; do
  grep -q "^#$v=" "$root/etc/opgate/opgate.env" || fail "opgate.env has no placeholder for $v"
done
check "opgate.env holds commented placeholders only"

unit=/lib/systemd/system/opgate.service
if ! verify=$(in_root systemd-analyze verify "$unit" 2>&1) || [ -n "$verify" ]; then
  echo "$verify" >&2
  fail "systemd-analyze verify $unit"
fi
check "systemd-analyze verify $unit: no complaints"
for f in opgate-alerts.yml opgate-dashboard.json opgate.example.toml; do
  [ -s "$root/usr/share/opgate/$f" ] || fail "/usr/share/opgate/$f is missing"
done
check "/usr/share/opgate: alert rules, dashboard, example config"
for f in README.md docs/operating.md docs/mcp.md docs/security.md; do
  [ -s "$root/usr/share/doc/opgate/$f" ] || fail "/usr/share/doc/opgate/$f is missing"
done
check "/usr/share/doc/opgate: the README and the manuals it links to"

phase "daemon as opgate"
# The shipped config with both listeners moved to free ports: chroots share
# this machine's network, where 8080 and 8081 may be taken. Nothing else
# changes, and both listeners must have been on 127.0.0.1.
sed -e 's/^listen = "127\.0\.0\.1:808[01]"$/listen = "127.0.0.1:0"/' \
  "$root/etc/opgate/opgate.toml" >"$root/tmp/opgate.toml"
[ "$(diff "$root/etc/opgate/opgate.toml" "$root/tmp/opgate.toml" | grep -c '^>')" = 2 ] ||
  fail "opgate.toml does not have both listeners on 127.0.0.1:8080 and :8081"
grep -qx 'data_dir = "/var/lib/opgate"' "$root/tmp/opgate.toml" || fail "data_dir is not /var/lib/opgate"

serve() {  # runs the daemon as opgate with opgate.env's variables, as systemd would
  local env=()
  mapfile -t env < <(grep -E '^[A-Z_][A-Z0-9_]*=' "$root/etc/opgate/opgate.env" || true)
  rm -f "$root/tmp/opgate.ports"
  chroot --userspec="$uid:$gid" "$root" /usr/bin/env -i PATH=/usr/bin:/bin "${env[@]}" \
    /usr/bin/opgate serve --config /tmp/opgate.toml --ports-file /tmp/opgate.ports \
    2>"$work/opgate.log" &
  daemon_pid=$!
}

# As installed, the env file has no webhook secret: the daemon must refuse.
serve
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""
[ "$rc" -ne 0 ] || fail "the daemon started without a webhook secret"
grep -q "has no secrets" "$work/opgate.log" || {
  cat "$work/opgate.log" >&2
  fail "the daemon did not say why it refused to start"
}
check "without secrets in opgate.env it refuses to start (exit $rc)"

secret="whsec_$(head -c 24 /dev/urandom | base64)"
sed -i -e "s|^#OPGATE_AGENTS_WEBHOOK_SECRETS=.*|OPGATE_AGENTS_WEBHOOK_SECRETS=$secret|" \
  -e 's|^#OPENAI_API_KEY=.*|OPENAI_API_KEY=sk-install-test|' \
  -e 's|^#OPGATE_PAYMENTS_SECRET_KEY=.*|OPGATE_PAYMENTS_SECRET_KEY=sk_test_install|' \
  "$root/etc/opgate/opgate.env"
# With its secrets but still no operator token, nobody could approve: it
# refuses too, and says so.
serve
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""
[ "$rc" -ne 0 ] || fail "the daemon started without an operator token"
grep -q "no operator token" "$work/opgate.log" || {
  cat "$work/opgate.log" >&2
  fail "the daemon did not say it has no operator token"
}
check "without an operator token it refuses to start (exit $rc)"
# What the admin does next: a token (only its hash in the file).
token_block=$(printf '\n[[operator.tokens]]\nprincipal = "admin"\ntoken_sha256 = "%s"\nscopes = ["admin"]\nowners = ["*"]\n' \
  "$(printf '%s' "tok-install-test" | sha256sum | cut -d' ' -f1)")
printf '%s\n' "$token_block" >>"$root/tmp/opgate.toml"
printf '%s\n' "$token_block" >>"$root/etc/opgate/opgate.toml"
serve
for _ in $(seq 1 600); do  # until it has bound both ports, or exited (30 s at most)
  [ -s "$root/tmp/opgate.ports" ] && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.05
done
if [ ! -s "$root/tmp/opgate.ports" ]; then
  cat "$work/opgate.log" >&2
  fail "the daemon did not start with the installed config"
fi
op=$(sed -n 's/.*"operator":\([0-9]*\).*/\1/p' "$root/tmp/opgate.ports")
ingress=$(sed -n 's/.*"ingress":\([0-9]*\).*/\1/p' "$root/tmp/opgate.ports")
[ "$(curl -fsS "http://127.0.0.1:$op/healthz")" = '{"ok":true}' ] || fail "/healthz"
curl -fsS "http://127.0.0.1:$op/readyz" >/dev/null || fail "/readyz"
curl -fsS "http://127.0.0.1:$op/metrics" | grep -q "^opgate_build_info{version=\"$version\",revision=\"" ||
  fail "/metrics has no opgate_build_info for $version"
check "serving as opgate: webhooks on 127.0.0.1:$ingress, /healthz /readyz /metrics on 127.0.0.1:$op"
[ "$(in_root stat -c '%U' /var/lib/opgate/CURRENT)" = opgate ] || fail "the store is not opgate's"
check "the store in /var/lib/opgate belongs to opgate"
kill -TERM "$daemon_pid"
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""
[ "$rc" -eq 0 ] || {
  cat "$work/opgate.log" >&2
  fail "SIGTERM: exit $rc"
}
check "SIGTERM: drained, exit 0"

phase "systemd boot (nspawn)"
# The unit as installed, under systemd as PID 1, in a network namespace of
# its own (so 8080 and 8081 are free). A oneshot unit ordered after opgate
# (Type=notify: after READY=1) records what systemd and /healthz say, stops
# opgate, records how it ended, and powers the container off.
cat >"$root/etc/systemd/system/opgate-install-test.service" <<'UNIT'
[Unit]
Description=install test probe of opgate.service
After=opgate.service
Wants=opgate.service
[Service]
Type=oneshot
StandardOutput=append:/root/probe.txt
StandardError=inherit
ExecStart=/bin/systemctl show opgate -p ActiveState -p SubState -p StatusText -p NRestarts -p WatchdogUSec
ExecStart=/bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/8081 && printf "GET /healthz HTTP/1.0\\r\\n\\r\\n" >&3 && echo "healthz: $$(tail -n 1 <&3)"'
ExecStart=/bin/systemctl stop opgate
ExecStart=/bin/systemctl show opgate -p Result -p ExecMainStatus -p ActiveState
ExecStart=/bin/bash -c 'echo "security: $$(systemd-analyze security opgate --no-pager | tail -n 1)"'
ExecStopPost=/bin/systemctl --no-block poweroff
[Install]
WantedBy=multi-user.target
UNIT
in_root systemctl enable --quiet opgate.service opgate-install-test.service
umount "$root/proc"
if ! timeout 120 systemd-nspawn --quiet -D "$root" --boot --register=no --keep-unit \
  --private-network --console=pipe >"$work/nspawn.log" 2>&1 </dev/null; then
  tail -n 30 "$work/nspawn.log" >&2
  fail "the container did not boot and power off within 120 s"
fi
mount -t proc proc "$root/proc"
probe=$(cat "$root/root/probe.txt" 2>/dev/null || true)
for want in ActiveState=active SubState=running NRestarts=0 WatchdogUSec=30s \
  "StatusText=webhooks on port 8080, operator API on port 8081" 'healthz: {"ok":true}' \
  Result=success ExecMainStatus=0 ActiveState=inactive; do
  grep -qxF "$want" <<<"$probe" || {
    echo "$probe" >&2
    in_root journalctl -u opgate --no-pager -o cat 2>/dev/null | tail -n 20 >&2 || true
    fail "under systemd: expected '$want'"
  }
done
check "systemd: active (running), status \"$(sed -n 's/^StatusText=//p' <<<"$probe")\", watchdog 30s"
check "systemd: /healthz answers; systemctl stop: Result=success, exit 0"
check "systemd-analyze $(sed -n 's/^security: //p' <<<"$probe")"
in_root systemctl disable --quiet opgate.service opgate-install-test.service

phase "apt-get purge"
in_root apt-get purge -y opgate >>"$work/apt.log" 2>&1 || {
  tail -n 20 "$work/apt.log" >&2
  fail "apt-get purge opgate failed"
}
[ ! -e "$root/usr/bin/opgate" ] || fail "/usr/bin/opgate is still there"
[ ! -e "$root/etc/opgate/opgate.toml" ] || fail "the purge left /etc/opgate/opgate.toml"
[ -e "$root/var/lib/opgate/CURRENT" ] || fail "the purge deleted the data in /var/lib/opgate"
in_root getent passwd opgate >/dev/null || fail "the purge removed the user opgate"
check "purged: binaries and conffiles gone; the data and the user opgate kept"

phase ""
echo "install test passed in $(($(date +%s) - started)) s ($timings)"
