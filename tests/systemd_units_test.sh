#!/usr/bin/env bash
# systemd units and install.sh (issue 6). deploy/install.sh --destdir stages the built
# daemons, units and configs below a temporary root, into which the host's own system
# units (sysinit.target and the like, which every service depends on) are copied; then
# `systemd-analyze verify --root` checks pstrain-ps.service and the template's instances
# pstrain-worker@0 and pstrain-worker@cpu0 as systemd would load them from /etc, ExecStart
# binaries included. verify exits 0 on many errors it only logs ("Unknown key ...,
# ignoring"), so any output at all counts as a failure; two broken units check that this
# check fails. Then install.sh itself: a second install changes nothing (and keeps an
# edited config), another --prefix is written into the units (which verify again),
# --dry-run touches nothing, --uninstall removes binaries and units but keeps the configs,
# --purge removes those too. Also the restart settings of issue 11 (each in its section),
# Documentation= naming the installed README, and the ps's checkpoint-dir being one of its
# unit's state directories (tests/systemd_live_test.sh runs them under a real systemd).
# The hardening of issue 12: the sandbox settings each unit must have (and the ones the
# worker must not have, for the GPU), `systemd-analyze security --offline` at most 2.0
# for every unit, and install.sh's IP allow-list drop-ins (--cluster-ips, --tf-config,
# TF_CONFIG): written, verified, kept on reinstall, removed by --uninstall. Mutual TLS
# (issue 12, item 2): install.sh --tls-cert, --tls-key and --tls-ca copy the files and write
# LoadCredential= drop-ins, which verify and keep the scores; half of the options is refused.
source "$(dirname "$0")/lib.sh"

DEPLOY="$RUNFILES/deploy"
INSTALL=(bash "$DEPLOY/install.sh" --build-dir "$RUNFILES")
TMP="${TEST_TMPDIR:-$(mktemp -d)}/systemd_units_test.$$"
mkdir -p "$TMP"
checks=0

command -v systemd-analyze >/dev/null ||
  fail "no systemd-analyze (Debian package systemd, which ./pstrain installs)"
HOST_UNITS=/usr/lib/systemd/system
[ -d "$HOST_UNITS" ] || HOST_UNITS=/lib/systemd/system
[ -e "$HOST_UNITS/sysinit.target" ] || fail "no system units in $HOST_UNITS (is systemd installed?)"
# Documentation=man: links are checked only where man pages are installed at all.
MAN=no
man -w systemd.service.5 >/dev/null 2>&1 && MAN=yes

# new_root DIR: an empty root holding only the host's system units.
new_root() {
  mkdir -p "$1/usr/lib/systemd"
  cp -a "$HOST_UNITS" "$1/usr/lib/systemd/system"
}

# files_in ROOT: what install.sh put there (the copied system units left out), with sums.
files_in() {
  (cd "$1" && find . \( -path ./usr/lib/systemd/system -prune \) -o \( -type f -print \) |
    sort | xargs -r sha256sum)
}

# verify ROOT UNIT: systemd-analyze verify; prints its output and fails on any.
verify() {
  local out rc=0
  out=$(systemd-analyze verify --root="$1" --man="$MAN" "$2" 2>&1) || rc=$?
  if [ "$rc" != 0 ] || [ -n "$out" ]; then
    printf '%s\n' "$out"
    echo "(systemd-analyze verify exited $rc)"
    return 1
  fi
}

# 1. Install into a staging root; the units there are deploy/systemd's, byte for byte
# (the default prefix and sysconfdir are the ones the units name).
ROOT="$TMP/root"
new_root "$ROOT"
"${INSTALL[@]}" --destdir "$ROOT" >"$OUT/install1.log" 2>&1 || fail "install.sh --destdir failed"
for f in usr/local/bin/pstrain-ps usr/local/bin/pstrain-worker; do
  [ -x "$ROOT/$f" ] || fail "install.sh did not install /$f"
done
cmp -s "$ROOT/usr/local/bin/pstrain-ps" "$PS_BIN" || fail "installed pstrain-ps is not the built one"
for u in pstrain-ps.service pstrain-worker@.service; do
  cmp -s "$ROOT/etc/systemd/system/$u" "$DEPLOY/systemd/$u" ||
    fail "installed $u differs from deploy/systemd/$u"
done
for c in ps.conf worker.conf; do
  cmp -s "$ROOT/etc/pstrain/$c" "$DEPLOY/$c" || fail "installed /etc/pstrain/$c differs from deploy/$c"
done
checks=$((checks + 1))
pass "install.sh --destdir: binaries, units and configs staged"

# 2. Every unit as systemd would load it; the template through two instances.
for u in pstrain-ps.service pstrain-worker@0.service pstrain-worker@cpu0.service; do
  report=$(verify "$ROOT" "$u") || fail "systemd-analyze verify $u: $report"
  checks=$((checks + 1))
  pass "systemd-analyze verify $u (man pages checked: $MAN)"
done

# 2b. The restart and recovery settings (issue 11), each in its section: verify accepts the
# [Unit] start limits in [Service] too (their old place) but systemd then ignores them.
# unit_key FILE SECTION KEY: the values KEY= has in [SECTION], one a line.
unit_key() {
  awk -v sec="[$2]" -v key="$3" '/^\[/ { in_sec = ($0 == sec); next }
    in_sec && index($0, key "=") == 1 { print substr($0, length(key) + 2) }' "$1"
}
for u in pstrain-ps.service pstrain-worker@.service; do
  f=$ROOT/etc/systemd/system/$u
  prevent=3
  [ "$u" = pstrain-ps.service ] && prevent="3 4 5"
  for kv in Service:Restart=on-failure Service:SuccessExitStatus=3 "Service:RestartPreventExitStatus=$prevent"; do
    sec=${kv%%:*} k=${kv#*:}
    [ "$(unit_key "$f" "$sec" "${k%%=*}")" = "${k#*=}" ] || fail "$u: no ${k} in [$sec]"
  done
  for k in RestartSec StartLimitIntervalSec StartLimitBurst; do
    sec=Unit
    [ "$k" = RestartSec ] && sec=Service
    [ -n "$(unit_key "$f" "$sec" "$k")" ] || fail "$u: no $k= in [$sec]"
    [ -z "$(unit_key "$f" "$([ "$sec" = Unit ] && echo Service || echo Unit)" "$k")" ] ||
      fail "$u: $k= in the wrong section"
  done
  [ "$(unit_key "$f" Unit StartLimitBurst)" -gt 1 ] || fail "$u: StartLimitBurst below 2"
  # Documentation= names pstrain's own README, which install.sh put there.
  doc=$(unit_key "$f" Unit Documentation)
  [ "$doc" = file:/usr/local/share/doc/pstrain/README.md ] || fail "$u: Documentation=$doc"
  cmp -s "$ROOT${doc#file:}" "$DEPLOY/README.md" || fail "$u: $doc was not installed (deploy/README.md)"
done
# The ps's checkpoint directory is one the unit lets it write: a StateDirectory= entry.
ckpt_dir=$(sed -n 's/^checkpoint-dir *= *//p' "$ROOT/etc/pstrain/ps.conf")
[ -n "$ckpt_dir" ] || fail "ps.conf sets no checkpoint-dir"
unit_key "$ROOT/etc/systemd/system/pstrain-ps.service" Service StateDirectory | tr ' ' '\n' |
  grep -qx "${ckpt_dir#/var/lib/}" || fail "checkpoint-dir $ckpt_dir is not a StateDirectory= of pstrain-ps.service"
grep -q '^# reconnect-timeout = 300$' "$ROOT/etc/pstrain/worker.conf" || fail "worker.conf lists no reconnect-timeout"
checks=$((checks + 1))
pass "restart settings: Restart=on-failure, SuccessExitStatus=3, RestartPreventExitStatus=3 (the ps: 3 4 5), start limits in [Unit]; Documentation=$doc installed; checkpoint-dir $ckpt_dir is a StateDirectory"

# 2c. Hardening (issue 12). Settings both units have, each as the one value in [Service]:
# an allow-list of system calls, hidden processes, a user namespace, no capabilities, an IP
# allow-list, no netlink. The ps also gets ProcSubset=pid and MemoryDenyWriteExecute=yes;
# the worker must not (the CUDA driver reads /proc/driver/nvidia and /proc/devices, and is
# not known to do without W+X memory), must keep its NVIDIA devices and no PrivateDevices=,
# and runs as a user of its own per instance.
# unit_has FILE KEY VALUE: [Service] sets KEY=VALUE (the last assignment counts).
unit_has() {
  local v
  v=$(unit_key "$1" Service "$2" | tail -n 1)
  [ "$v" = "$3" ] || fail "$(basename "$1"): $2=${v:-(unset)}, expected $2=$3"
}
for u in pstrain-ps.service pstrain-worker@.service; do
  f=$ROOT/etc/systemd/system/$u
  [ "$(unit_key "$f" Service SystemCallFilter | head -n 1)" = @system-service ] ||
    fail "$u: SystemCallFilter= does not start with @system-service"
  unit_key "$f" Service SystemCallFilter | grep -q '^~.*@privileged' || fail "$u: @privileged not taken out of SystemCallFilter="
  for kv in SystemCallErrorNumber=EPERM SystemCallArchitectures=native ProtectProc=invisible \
            PrivateUsers=yes PrivateTmp=yes PrivateIPC=yes RemoveIPC=yes NoNewPrivileges=yes \
            ProtectSystem=strict ProtectHome=yes DynamicUser=yes CapabilityBoundingSet= \
            IPAddressDeny=any UMask=0077 "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"; do
    unit_has "$f" "${kv%%=*}" "${kv#*=}"
  done
  unit_key "$f" Service IPAddressAllow | tail -n 1 | tr ' ' '\n' | grep -qx localhost ||
    fail "$u: IPAddressAllow= does not allow localhost"
done
PSU=$ROOT/etc/systemd/system/pstrain-ps.service
WU=$ROOT/etc/systemd/system/pstrain-worker@.service
unit_has "$PSU" ProcSubset pid
unit_has "$PSU" MemoryDenyWriteExecute yes
unit_has "$PSU" PrivateDevices yes
unit_has "$WU" User pstrain-worker-%i
unit_has "$WU" DevicePolicy closed
[ -z "$(unit_key "$WU" Service PrivateDevices)$(unit_key "$WU" Service ProcSubset)$(unit_key "$WU" Service MemoryDenyWriteExecute)" ] ||
  fail "pstrain-worker@.service sets PrivateDevices=, ProcSubset= or MemoryDenyWriteExecute=, which the GPU does not survive"
unit_key "$WU" Service DeviceAllow | grep -qx 'char-nvidia\* rw' || fail "pstrain-worker@.service lost DeviceAllow=char-nvidia* rw"
# The exposure systemd-analyze gives the units as installed (0 best, 10 worst): 2.0 at most.
# --threshold=20 makes it exit non-zero above 2.0: the exit status is the verdict, and the
# score is read from its text only to be shown.
scores=
for u in pstrain-ps.service pstrain-worker@0.service pstrain-worker@cpu0.service; do
  out=$(systemd-analyze security --offline=yes --root="$ROOT" --threshold=20 --no-pager "$u" 2>&1) ||
    fail "systemd-analyze security $u: above 2.0 (or failed): $(echo "$out" | grep -E '✗|Overall' | head -n 12)"
  score=$(echo "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  scores="$scores $u ${score:-(score not found in its output)};"
done
checks=$((checks + 1))
pass "hardening: sandbox settings in place; systemd-analyze security --offline:$scores (at most 2.0)"

# 3. The check itself: a unit with an error must fail it. A bad value is only logged (verify
# exits 0), a missing binary makes verify exit 1; both must count.
sed 's/^Type=notify$/Type=notfy/' "$DEPLOY/systemd/pstrain-ps.service" \
  >"$ROOT/etc/systemd/system/pstrain-bad-type.service"
sed 's#^ExecStart=/usr/local/bin/pstrain-ps #ExecStart=/usr/local/bin/pstrain-nope #' \
  "$DEPLOY/systemd/pstrain-ps.service" >"$ROOT/etc/systemd/system/pstrain-bad-exec.service"
for u in pstrain-bad-type.service pstrain-bad-exec.service; do
  cmp -s "$ROOT/etc/systemd/system/$u" "$DEPLOY/systemd/pstrain-ps.service" &&
    fail "could not break $u (the sed found nothing to change)"
  verify "$ROOT" "$u" >"$OUT/$u.verify" && fail "systemd-analyze verify accepted the broken $u"
  rm "$ROOT/etc/systemd/system/$u"
done
checks=$((checks + 1))
pass "broken units fail the check: $(sed "s#^$ROOT/etc/systemd/system/##" \
  "$OUT/pstrain-bad-type.service.verify" | head -n 1)"

# 4. Installing again changes nothing: units unchanged, configs kept (an edited one too),
# the examples put next to them.
echo "# edited on this host" >>"$ROOT/etc/pstrain/ps.conf"
before=$(files_in "$ROOT")
"${INSTALL[@]}" --destdir "$ROOT" >"$OUT/install2.log" 2>&1 || fail "second install.sh failed"
for u in pstrain-ps.service pstrain-worker@.service; do
  grep -q "^unchanged  $ROOT/etc/systemd/system/$u\$" "$OUT/install2.log" ||
    fail "second install did not report $u unchanged"
done
grep -q "^# edited on this host\$" "$ROOT/etc/pstrain/ps.conf" || fail "second install overwrote ps.conf"
for c in ps.conf worker.conf; do
  cmp -s "$ROOT/etc/pstrain/$c.example" "$DEPLOY/$c" || fail "no /etc/pstrain/$c.example after reinstall"
done
after=$(files_in "$ROOT" | grep -v '\.conf\.example$')
[ "$before" = "$after" ] || fail "second install changed files: $(diff <(echo "$before") <(echo "$after") | head -n 5)"
checks=$((checks + 1))
pass "install.sh twice: nothing changed, edited ps.conf kept"

# 5. Another prefix and sysconfdir are written into the units, which verify in their root.
ALT="$TMP/alt"
new_root "$ALT"
"${INSTALL[@]}" --destdir "$ALT" --prefix /opt/pstrain --sysconfdir /etc/pstrain-alt \
  >"$OUT/install-alt.log" 2>&1 || fail "install.sh --prefix /opt/pstrain failed"
grep -qx 'ExecStart=/opt/pstrain/bin/pstrain-ps --config /etc/pstrain-alt/ps.conf' \
  "$ALT/etc/systemd/system/pstrain-ps.service" || fail "--prefix/--sysconfdir not written into pstrain-ps.service"
grep -qx 'Environment=PSTRAIN_CUDA_LIB=/opt/pstrain/lib/libpstrain_cuda.so' \
  "$ALT/etc/systemd/system/pstrain-worker@.service" || fail "--prefix not written into pstrain-worker@.service"
grep -qx 'Documentation=file:/opt/pstrain/share/doc/pstrain/README.md' \
  "$ALT/etc/systemd/system/pstrain-ps.service" || fail "--prefix not written into Documentation="
[ -f "$ALT/opt/pstrain/share/doc/pstrain/README.md" ] || fail "--prefix /opt/pstrain: no README in share/doc/pstrain"
for u in pstrain-ps.service pstrain-worker@1.service; do
  report=$(verify "$ALT" "$u") || fail "systemd-analyze verify $u (prefix /opt/pstrain): $report"
done
checks=$((checks + 1))
pass "install.sh --prefix /opt/pstrain --sysconfdir /etc/pstrain-alt: units rendered and verified"

# 6. --dry-run stages nothing.
DRY="$TMP/dry"
mkdir -p "$DRY"
"${INSTALL[@]}" --destdir "$DRY" --dry-run >"$OUT/install-dry.log" 2>&1 || fail "install.sh --dry-run failed"
[ -z "$(find "$DRY" -mindepth 1 -print -quit)" ] || fail "install.sh --dry-run wrote files: $(find "$DRY" -type f | head -n 3)"
grep -q '^+ install ' "$OUT/install-dry.log" || fail "install.sh --dry-run printed no commands"
checks=$((checks + 1))
pass "install.sh --dry-run: commands printed, nothing written"

# 7. --uninstall: no binaries, units or examples left; the configs and the cluster secret
# stay until --purge. The secret install.sh wrote is 256 bits, hex, readable by root only.
secret_line=$(files_in "$ROOT" | grep ' ./etc/pstrain/secret$' || true)
[ -n "$secret_line" ] || fail "install.sh wrote no cluster secret"
[ "$(stat -c %a "$ROOT/etc/pstrain/secret")" = 600 ] && [ "$(wc -c <"$ROOT/etc/pstrain/secret")" -eq 64 ] ||
  fail "the cluster secret is not 64 hex digits with mode 600: $secret_line"
"${INSTALL[@]}" --destdir "$ROOT" --uninstall >"$OUT/uninstall.log" 2>&1 || fail "install.sh --uninstall failed"
left=$(files_in "$ROOT" | awk '{print $2}' | tr '\n' ' ')
[ "$left" = "./etc/pstrain/ps.conf ./etc/pstrain/secret ./etc/pstrain/worker.conf " ] ||
  fail "after --uninstall expected only the two configs and the secret, found: $left"
"${INSTALL[@]}" --destdir "$ROOT" --uninstall --purge >"$OUT/purge.log" 2>&1 ||
  fail "install.sh --uninstall --purge failed"
left=$(files_in "$ROOT")
[ -z "$left" ] || fail "after --uninstall --purge files are left: $left"
[ ! -e "$ROOT/etc/pstrain" ] || fail "after --purge /etc/pstrain is still there"
checks=$((checks + 1))
pass "install.sh --uninstall kept only the configs, --purge removed them"

# 8. The IP allow-list drop-ins: --cluster-ips (addresses, prefixes, host names) and
# --tf-config (the cluster spec's hosts) write the same list into both units' drop-in, which
# empties the unit's own list first; the DNS servers of the root's resolv.conf join it
# (not a loopback one); the units still verify and score; an install without the options
# keeps the drop-ins; an unresolvable host stops install.sh before it installs anything;
# --uninstall removes the drop-ins and their directories.
NET="$TMP/net"
new_root "$NET"
mkdir -p "$NET/etc"
printf 'nameserver 127.0.0.53\nnameserver 10.53.0.1\n' >"$NET/etc/resolv.conf"
"${INSTALL[@]}" --destdir "$NET" --cluster-ips 10.1.0.0/16,192.0.2.7 --cluster-ips "localhost fd00::5" \
  >"$OUT/install-net.log" 2>&1 || fail "install.sh --cluster-ips failed: $(tail -n 1 "$OUT/install-net.log")"
for u in pstrain-ps.service pstrain-worker@.service; do
  d=$NET/etc/systemd/system/$u.d/ipaddress.conf
  [ -f "$d" ] || fail "install.sh --cluster-ips wrote no $u.d/ipaddress.conf"
  [ "$(unit_key "$d" Service IPAddressAllow | tr '\n' '|')" = "|localhost 10.1.0.0/16 192.0.2.7 fd00::5 10.53.0.1|" ] ||
    fail "$u.d/ipaddress.conf: IPAddressAllow= $(unit_key "$d" Service IPAddressAllow | tr '\n' '|')"
done
for u in pstrain-ps.service pstrain-worker@1.service; do
  report=$(verify "$NET" "$u") || fail "systemd-analyze verify $u with the IP drop-in: $report"
  systemd-analyze security --offline=yes --root="$NET" --threshold=20 --no-pager "$u" >/dev/null 2>&1 ||
    fail "systemd-analyze security $u with the IP drop-in: above 2.0"
done
"${INSTALL[@]}" --destdir "$NET" >"$OUT/install-net2.log" 2>&1 || fail "install.sh without --cluster-ips failed"
grep -q "^kept       $NET/etc/systemd/system/pstrain-ps.service.d/ipaddress.conf" "$OUT/install-net2.log" ||
  fail "an install without --cluster-ips did not keep the drop-in"
tf='{"cluster": {"ps": ["localhost:7070"], "worker": ["192.0.2.8:7071", "[2001:db8::1]:7072"]}, "task": {"type": "ps", "index": 0}}'
echo "$tf" >"$TMP/tf_config.json"
"${INSTALL[@]}" --destdir "$NET" --tf-config "@$TMP/tf_config.json" >"$OUT/install-net3.log" 2>&1 ||
  fail "install.sh --tf-config failed: $(tail -n 1 "$OUT/install-net3.log")"
want="localhost 192.0.2.8 2001:db8::1 10.53.0.1"
[ "$(unit_key "$NET/etc/systemd/system/pstrain-worker@.service.d/ipaddress.conf" Service IPAddressAllow | tail -n 1)" = "$want" ] ||
  fail "install.sh --tf-config: IPAddressAllow=$(unit_key "$NET/etc/systemd/system/pstrain-worker@.service.d/ipaddress.conf" Service IPAddressAllow | tail -n 1), expected $want"
TF_CONFIG='{"cluster": {"ps": ["192.0.2.9:7070"], "worker": ["192.0.2.9:7071"]}}' "${INSTALL[@]}" --destdir "$NET" \
  >"$OUT/install-net4.log" 2>&1 || fail "install.sh with TF_CONFIG failed"
[ "$(unit_key "$NET/etc/systemd/system/pstrain-ps.service.d/ipaddress.conf" Service IPAddressAllow | tail -n 1)" = "localhost 192.0.2.9 10.53.0.1" ] ||
  fail "install.sh did not take the allow list from TF_CONFIG"
BADNET="$TMP/badnet"
mkdir -p "$BADNET"
"${INSTALL[@]}" --destdir "$BADNET" --cluster-ips no-such-host.invalid >"$OUT/install-badnet.log" 2>&1 &&
  fail "install.sh accepted the unresolvable host no-such-host.invalid"
grep -q "cannot resolve the cluster host 'no-such-host.invalid'" "$OUT/install-badnet.log" ||
  fail "install.sh did not name the unresolvable host: $(tail -n 1 "$OUT/install-badnet.log")"
[ -z "$(find "$BADNET" -mindepth 1 -print -quit)" ] || fail "install.sh installed files before refusing the host"
"${INSTALL[@]}" --destdir "$NET" --uninstall --purge >"$OUT/uninstall-net.log" 2>&1 || fail "install.sh --uninstall (drop-ins) failed"
left=$(files_in "$NET" | awk '{print $2}' | grep -v '^./etc/resolv.conf$' || true)
[ -z "$left" ] || fail "after --uninstall --purge files are left: $left"
[ ! -e "$NET/etc/systemd/system/pstrain-ps.service.d" ] || fail "--uninstall left pstrain-ps.service.d"
checks=$((checks + 1))
pass "IP allow-list drop-ins: --cluster-ips, --tf-config and TF_CONFIG written (with the DNS server), verified, kept, refused for a bad host, uninstalled"

# 9. TLS: the three files are copied under /etc/pstrain/tls (the key mode 0600) and handed to
# both units with LoadCredential= under the names the daemons look for; the units still
# verify and score; an install without the options keeps them; half of the options stops
# install.sh before it installs anything; --uninstall removes the drop-ins, --purge the files.
TLSR="$TMP/tls"
new_root "$TLSR"
for f in cert.pem key.pem ca.pem; do echo "not checked by install.sh: $f" >"$TMP/in-$f"; done
"${INSTALL[@]}" --destdir "$TLSR" --tls-cert "$TMP/in-cert.pem" --tls-key "$TMP/in-key.pem" \
  --tls-ca "$TMP/in-ca.pem" >"$OUT/install-tls.log" 2>&1 ||
  fail "install.sh --tls-* failed: $(tail -n 1 "$OUT/install-tls.log")"
for f in cert.pem key.pem ca.pem; do
  cmp -s "$TLSR/etc/pstrain/tls/$f" "$TMP/in-$f" || fail "install.sh did not install /etc/pstrain/tls/$f"
done
[ "$(stat -c %a "$TLSR/etc/pstrain/tls/key.pem")" = 600 ] || fail "the TLS key is not mode 600"
for u in pstrain-ps.service pstrain-worker@.service; do
  d=$TLSR/etc/systemd/system/$u.d/tls.conf
  [ "$(unit_key "$d" Service LoadCredential | tr '\n' '|')" = "pstrain-tls-cert:/etc/pstrain/tls/cert.pem|pstrain-tls-key:/etc/pstrain/tls/key.pem|pstrain-tls-ca:/etc/pstrain/tls/ca.pem|" ] ||
    fail "$u.d/tls.conf: LoadCredential= $(unit_key "$d" Service LoadCredential | tr '\n' '|')"
done
for u in pstrain-ps.service pstrain-worker@1.service; do
  report=$(verify "$TLSR" "$u") || fail "systemd-analyze verify $u with the TLS drop-in: $report"
  systemd-analyze security --offline=yes --root="$TLSR" --threshold=20 --no-pager "$u" >/dev/null 2>&1 ||
    fail "systemd-analyze security $u with the TLS drop-in: above 2.0"
done
"${INSTALL[@]}" --destdir "$TLSR" >"$OUT/install-tls2.log" 2>&1 || fail "install.sh without --tls-* failed"
grep -q "^kept       $TLSR/etc/systemd/system/pstrain-worker@.service.d/tls.conf" "$OUT/install-tls2.log" ||
  fail "an install without --tls-* did not keep the TLS drop-in"
BADTLS="$TMP/badtls"
mkdir -p "$BADTLS"
rc=0; "${INSTALL[@]}" --destdir "$BADTLS" --tls-cert "$TMP/in-cert.pem" >"$OUT/install-badtls.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "go together" "$OUT/install-badtls.log" || fail "install.sh with only --tls-cert: rc $rc"
[ -z "$(find "$BADTLS" -mindepth 1 -print -quit)" ] || fail "install.sh installed files before refusing half of the TLS options"
"${INSTALL[@]}" --destdir "$TLSR" --uninstall >"$OUT/uninstall-tls.log" 2>&1 || fail "install.sh --uninstall (TLS) failed"
[ ! -e "$TLSR/etc/systemd/system/pstrain-ps.service.d" ] || fail "--uninstall left pstrain-ps.service.d"
[ -f "$TLSR/etc/pstrain/tls/key.pem" ] || fail "--uninstall removed the TLS key (only --purge may)"
"${INSTALL[@]}" --destdir "$TLSR" --uninstall --purge >"$OUT/purge-tls.log" 2>&1 || fail "install.sh --purge (TLS) failed"
left=$(files_in "$TLSR")
[ -z "$left" ] || fail "after --uninstall --purge files are left: $left"
checks=$((checks + 1))
pass "TLS: install.sh --tls-cert/--tls-key/--tls-ca copied the files, LoadCredential= drop-ins verified, kept, half refused, uninstalled"

echo "$checks passed, 0 failed"
