#!/usr/bin/env bash
# Installs pstrain as systemd services: the built daemons, the CUDA backend when it was
# built, the units, example configs and deploy/README.md (the units' Documentation=, in
# PREFIX/share/doc/pstrain). Run from the repository after
#   bazel build //ps:pstrain-ps //worker:pstrain-worker   (and //kernels/cuda:libpstrain_cuda.so for GPUs)
#
#   deploy/install.sh [--prefix /usr/local] [--sysconfdir /etc/pstrain]
#                     [--unitdir /etc/systemd/system] [--destdir STAGING]
#                     [--build-dir bazel-bin] [--no-reload] [--dry-run]
#                     [--cluster-ips ADDR,...] [--tf-config JSON|@FILE]
#                     [--tls-cert FILE --tls-key FILE --tls-ca FILE]
#   deploy/install.sh --uninstall [same options] [--purge]
#
# Running it again is harmless: binaries and units are replaced, existing config files are
# kept (the example is then installed next to them as NAME.example). --uninstall removes
# what an install put there, but keeps the configs unless --purge is given. --destdir
# stages everything below a directory (for packaging); systemctl daemon-reload runs only
# on a live systemd without --destdir or --no-reload. --build-dir is where the built
# ps/pstrain-ps, worker/pstrain-worker and kernels/cuda/libpstrain_cuda.so are.
#
# The units talk IP only to loopback, link-local and private addresses (IPAddressAllow=).
# --cluster-ips (addresses, prefixes or host names, comma- or space-separated; repeatable;
# `any` lifts the limit) and --tf-config (the hosts of a TF_CONFIG cluster spec; without
# either option, the TF_CONFIG environment variable when set) replace that list with the
# cluster's own addresses, loopback and the DNS servers of /etc/resolv.conf, in the
# drop-ins UNITDIR/pstrain-ps.service.d/ipaddress.conf and
# UNITDIR/pstrain-worker@.service.d/ipaddress.conf. Host names are resolved now: run it
# again when an address changes. Without either, drop-ins already there are kept.
#
# --tls-cert, --tls-key and --tls-ca (all three or none) turn on mutual TLS between the ps
# and the workers: this host's certificate and key and the cluster's CA (see "TLS" in
# README.md for making them) are copied to SYSCONFDIR/tls/ (the key readable by root only),
# and the drop-ins UNITDIR/pstrain-ps.service.d/tls.conf and
# UNITDIR/pstrain-worker@.service.d/tls.conf hand them to the daemons with LoadCredential=,
# as the units do with the cluster secret. One certificate serves both daemons of a host. Run
# it again with new files to replace them; without the options, files and drop-ins already
# there are kept.
set -euo pipefail

prefix=/usr/local
sysconfdir=/etc/pstrain
unitdir=/etc/systemd/system
destdir=
builddir=
reload=1
uninstall=0
purge=0
dry=0
cluster_ips=()
tf_config=
tf_config_set=0
tls_cert=
tls_key=
tls_ca=

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --sysconfdir) sysconfdir=${2:?--sysconfdir needs a directory}; shift 2 ;;
    --sysconfdir=*) sysconfdir=${1#*=}; shift ;;
    --unitdir) unitdir=${2:?--unitdir needs a directory}; shift 2 ;;
    --unitdir=*) unitdir=${1#*=}; shift ;;
    --destdir) destdir=${2:?--destdir needs a directory}; shift 2 ;;
    --destdir=*) destdir=${1#*=}; shift ;;
    --build-dir) builddir=${2:?--build-dir needs a directory}; shift 2 ;;
    --build-dir=*) builddir=${1#*=}; shift ;;
    --no-reload) reload=0; shift ;;
    --uninstall) uninstall=1; shift ;;
    --purge) purge=1; shift ;;
    --dry-run) dry=1; shift ;;
    --cluster-ips) cluster_ips+=("${2?--cluster-ips needs addresses}"); shift 2 ;;
    --cluster-ips=*) cluster_ips+=("${1#*=}"); shift ;;
    --tf-config) tf_config=${2:?--tf-config needs the JSON or @FILE}; tf_config_set=1; shift 2 ;;
    --tf-config=*) tf_config=${1#*=}; tf_config_set=1; shift ;;
    --tls-cert) tls_cert=${2:?--tls-cert needs a file}; shift 2 ;;
    --tls-cert=*) tls_cert=${1#*=}; shift ;;
    --tls-key) tls_key=${2:?--tls-key needs a file}; shift 2 ;;
    --tls-key=*) tls_key=${1#*=}; shift ;;
    --tls-ca) tls_ca=${2:?--tls-ca needs a file}; shift 2 ;;
    --tls-ca=*) tls_ca=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

for d in "$prefix" "$sysconfdir" "$unitdir"; do
  case "$d" in
    /*) ;;
    *) echo "install.sh: '$d' is not an absolute path" >&2; exit 2 ;;
  esac
done
case "$destdir" in
  ''|/*) ;;
  *) destdir=$(cd "$destdir" 2>/dev/null && pwd) || { echo "install.sh: no directory '$destdir'" >&2; exit 2; } ;;
esac
destdir=${destdir%/}

# TLS: all three files or none, each readable, checked before anything is installed (the
# daemons check the rest when they start: the key matching the certificate, the CA's
# signature).
tls=0
if [ -n "$tls_cert$tls_key$tls_ca" ]; then
  if [ -z "$tls_cert" ] || [ -z "$tls_key" ] || [ -z "$tls_ca" ]; then
    echo "install.sh: --tls-cert, --tls-key and --tls-ca go together" >&2
    exit 2
  fi
  for f in "$tls_cert" "$tls_key" "$tls_ca"; do
    [ -f "$f" ] && [ -r "$f" ] || { echo "install.sh: cannot read the TLS file '$f'" >&2; exit 2; }
  done
  tls=1
fi

# The cluster spec: --tf-config, else TF_CONFIG from the environment (which sudo passes on
# only when told: sudo TF_CONFIG=... deploy/install.sh).
if [ "$tf_config_set" = 0 ] && [ "${#cluster_ips[@]}" = 0 ] && [ -n "${TF_CONFIG:-}" ] &&
   [ "$uninstall" = 0 ]; then
  tf_config=$TF_CONFIG
  echo "note: the units' IP allow-list comes from \$TF_CONFIG"
fi

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
bindir=$prefix/bin
libdir=$prefix/lib
docdir=$prefix/share/doc/pstrain
builddir=${builddir:-$repo/bazel-bin}
PS_BIN=$builddir/ps/pstrain-ps
WORKER_BIN=$builddir/worker/pstrain-worker
CUDA_LIB=$builddir/kernels/cuda/libpstrain_cuda.so

run() {
  if [ "$dry" = 1 ]; then echo "+ $*"; else "$@"; fi
}

# The units name /usr/local/bin, /usr/local/lib, /usr/local/share and /etc/pstrain; other
# prefixes are written into them.
render_unit() {
  sed -e "s#/usr/local/bin/#$bindir/#g" -e "s#/usr/local/lib/#$libdir/#g" \
      -e "s#/usr/local/share/#$prefix/share/#g" -e "s#/etc/pstrain#$sysconfdir#g" "$1"
}

# install_generated TMP DST: installs TMP (a temporary file, removed afterwards) as DST, or
# says that DST is unchanged.
install_generated() {
  local tmp=$1 dst=$2
  if [ -f "$dst" ] && cmp -s "$tmp" "$dst"; then
    echo "unchanged  $dst"
  else
    run install -D -m 0644 "$tmp" "$dst"
    echo "installed  $dst"
  fi
  rm -f "$tmp"
}

install_unit() {
  local src=$1 tmp
  tmp=$(mktemp)
  render_unit "$src" >"$tmp"
  install_generated "$tmp" "$destdir$unitdir/$(basename "$1")"
}

# The IP allow-list drop-ins (issue 12), one per unit, and the TLS ones.
DROPIN_UNITS=(pstrain-ps.service pstrain-worker@.service)
dropin_path() { echo "$unitdir/$1.d/ipaddress.conf"; }
tls_dropin_path() { echo "$unitdir/$1.d/tls.conf"; }
TLS_DIR=$sysconfdir/tls

# cluster_hosts: the hosts of the cluster spec (--tf-config or $TF_CONFIG), one a line:
# every "HOST:PORT" string in it ("[V6]:PORT" too), without the port.
cluster_hosts() {
  local json=$tf_config
  if [ "${json#@}" != "$json" ]; then
    json=$(cat "${json#@}") || { echo "install.sh: cannot read the cluster spec ${tf_config#@}" >&2; return 2; }
  fi
  printf '%s\n' "$json" | { grep -oE '"[^"]+:[0-9]+"' || true; } | tr -d '"' |
    sed -E 's/:[0-9]+$//; s/^\[(.*)\]$/\1/'
}

# is_address WORD: an IPv4 or IPv6 address or prefix, or one of systemd's names for ranges.
is_address() {
  case "$1" in
    any|localhost|link-local|multicast) return 0 ;;
  esac
  [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+(/[0-9]+)?$ ]] ||
    [[ "$1" =~ ^[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(/[0-9]+)?$ ]]
}

# allow_list: localhost, the cluster's addresses (host names resolved now) and the DNS
# servers, each once, on one line; fails naming a host that does not resolve.
allow_list() {
  local words=() w a found=(localhost) hosts
  for w in "${cluster_ips[@]}"; do
    read -r -a a <<<"${w//,/ }"
    words+=("${a[@]}")
  done
  if [ -n "$tf_config" ]; then
    hosts=$(cluster_hosts) || return 2
    [ -n "$hosts" ] || { echo "install.sh: no HOST:PORT in the cluster spec" >&2; return 2; }
    mapfile -t a <<<"$hosts"
    words+=("${a[@]}")
  fi
  for w in "${words[@]}"; do
    case "$w" in 0.0.0.0|::|'') continue ;; esac
    if is_address "$w"; then
      found+=("$w")
    else
      mapfile -t a < <(getent ahosts "$w" 2>/dev/null | awk '{ print $1 }' | sort -u)
      [ -n "${a[0]:-}" ] ||
        { echo "install.sh: cannot resolve the cluster host '$w' (give its address instead)" >&2; return 2; }
      found+=("${a[@]}")
    fi
  done
  # The daemons resolve host names when they start: the DNS servers this host uses (a
  # loopback one, like systemd-resolved's, is allowed already).
  if [ -f "$destdir/etc/resolv.conf" ]; then
    for w in $(awk '$1 == "nameserver" { print $2 }' "$destdir/etc/resolv.conf"); do
      case "$w" in 127.*|::1|*%*) ;; *) found+=("$w") ;; esac
    done
  fi
  printf '%s\n' "${found[@]}" | awk '!seen[$0]++' | paste -sd ' '
}

# install_ip_dropins: writes the allow list into each unit's drop-in when the cluster is
# known; otherwise keeps the drop-ins there are (or there are none: the units' own list).
install_ip_dropins() {
  local list u dst tmp
  if [ "${#cluster_ips[@]}" = 0 ] && [ -z "$tf_config" ]; then
    for u in "${DROPIN_UNITS[@]}"; do
      dst=$destdir$(dropin_path "$u")
      if [ -e "$dst" ]; then
        echo "kept       $dst (--cluster-ips or --tf-config replaces it)"
      else
        IP_NOTE=1
      fi
    done
    return 0
  fi
  list=$IP_LIST
  for u in "${DROPIN_UNITS[@]}"; do
    tmp=$(mktemp)
    cat >"$tmp" <<EOF
# Written by deploy/install.sh from the cluster's addresses (--cluster-ips, --tf-config or
# TF_CONFIG), loopback and the DNS servers: the only addresses $u may exchange
# IP packets with. It replaces the unit's own list (loopback, link-local, private ranges).
# Host names were resolved when install.sh ran: run it again when an address changes.
[Service]
IPAddressAllow=
IPAddressAllow=$list
EOF
    install_generated "$tmp" "$destdir$(dropin_path "$u")"
  done
}
IP_NOTE=0

# install_tls: with --tls-*, copies the files to SYSCONFDIR/tls/ and writes each unit's TLS
# drop-in; without, keeps what is there.
install_tls() {
  local u tmp dst
  if [ "$tls" = 0 ]; then
    for u in "${DROPIN_UNITS[@]}"; do
      dst=$destdir$(tls_dropin_path "$u")
      if [ -e "$dst" ]; then echo "kept       $dst (--tls-cert, --tls-key and --tls-ca replace it)"; fi
    done
    return 0
  fi
  run install -D -m 0644 "$tls_cert" "$destdir$TLS_DIR/cert.pem"
  echo "installed  $destdir$TLS_DIR/cert.pem"
  run install -D -m 0600 "$tls_key" "$destdir$TLS_DIR/key.pem"
  echo "installed  $destdir$TLS_DIR/key.pem (mode 0600)"
  run install -D -m 0644 "$tls_ca" "$destdir$TLS_DIR/ca.pem"
  echo "installed  $destdir$TLS_DIR/ca.pem"
  for u in "${DROPIN_UNITS[@]}"; do
    tmp=$(mktemp)
    cat >"$tmp" <<EOF
# Written by deploy/install.sh --tls-cert, --tls-key and --tls-ca: mutual TLS between the ps
# and the workers. The daemon reads the files from \$CREDENTIALS_DIRECTORY/pstrain-tls-cert,
# pstrain-tls-key and pstrain-tls-ca (tls-cert, tls-key and tls-ca in its config file, the
# environment or its flags would win over them).
[Service]
LoadCredential=pstrain-tls-cert:$TLS_DIR/cert.pem
LoadCredential=pstrain-tls-key:$TLS_DIR/key.pem
LoadCredential=pstrain-tls-ca:$TLS_DIR/ca.pem
EOF
    install_generated "$tmp" "$destdir$(tls_dropin_path "$u")"
  done
}

install_config() {
  local src=$1 dst=$destdir$sysconfdir/$(basename "$1")
  if [ -e "$dst" ]; then
    run install -D -m 0644 "$src" "$dst.example"
    echo "kept       $dst (example in $dst.example)"
  else
    run install -D -m 0644 "$src" "$dst"
    echo "installed  $dst"
  fi
}

# The cluster secret (issue 12): 256 random bits, hex, readable by root only; the units hand
# it to the daemons with LoadCredential=. An existing one is kept: every host of a cluster
# must hold the same file.
install_secret() {
  local dst=$destdir$sysconfdir/secret
  if [ -e "$dst" ]; then
    echo "kept       $dst"
    return
  fi
  run install -d -m 0755 "$destdir$sysconfdir"
  if [ "$dry" = 1 ]; then
    echo "+ write 256 random bits to $dst (mode 0600)"
  else
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dst")
  fi
  echo "installed  $dst (a new cluster secret: copy this file to every host of the cluster)"
}

# systemd reloads only on a live system, not when staging.
live_systemd() {
  [ "$reload" = 1 ] && [ -z "$destdir" ] && [ -d /run/systemd/system ] &&
    command -v systemctl >/dev/null
}

reload_systemd() {
  if live_systemd; then run systemctl daemon-reload; fi
}

remove() {
  local f=$destdir$1
  if [ -e "$f" ] || [ -L "$f" ]; then
    run rm -f "$f"
    echo "removed    $f"
  fi
}

if [ "$uninstall" = 1 ]; then
  if live_systemd; then
    for u in $(systemctl list-units --all --plain --no-legend 'pstrain-ps.service' \
                 'pstrain-worker@*.service' 2>/dev/null | awk '{print $1}'); do
      echo "note: $u is still loaded; stop it with: systemctl disable --now $u"
    done
  fi
  remove "$bindir/pstrain-ps"
  remove "$bindir/pstrain-worker"
  remove "$libdir/libpstrain_cuda.so"
  remove "$unitdir/pstrain-ps.service"
  remove "$unitdir/pstrain-worker@.service"
  for u in "${DROPIN_UNITS[@]}"; do
    remove "$(dropin_path "$u")"
    remove "$(tls_dropin_path "$u")"
    d=$destdir$(dirname "$(dropin_path "$u")")
    [ -d "$d" ] && run rmdir --ignore-fail-on-non-empty "$d"
  done
  remove "$docdir/README.md"
  [ -d "$destdir$docdir" ] && run rmdir --ignore-fail-on-non-empty "$destdir$docdir"
  remove "$sysconfdir/ps.conf.example"
  remove "$sysconfdir/worker.conf.example"
  if [ "$purge" = 1 ]; then
    remove "$sysconfdir/ps.conf"
    remove "$sysconfdir/worker.conf"
    remove "$sysconfdir/secret"
    remove "$TLS_DIR/cert.pem"
    remove "$TLS_DIR/key.pem"
    remove "$TLS_DIR/ca.pem"
    [ -d "$destdir$TLS_DIR" ] && run rmdir --ignore-fail-on-non-empty "$destdir$TLS_DIR"
    [ -d "$destdir$sysconfdir" ] && run rmdir --ignore-fail-on-non-empty "$destdir$sysconfdir"
  else
    [ -e "$destdir$sysconfdir/ps.conf" ] && echo "kept       $destdir$sysconfdir/ps.conf (--purge removes it)"
    [ -e "$destdir$sysconfdir/worker.conf" ] && echo "kept       $destdir$sysconfdir/worker.conf (--purge removes it)"
  fi
  reload_systemd
  exit 0
fi

for b in "$PS_BIN" "$WORKER_BIN"; do
  if [ ! -x "$b" ]; then
    echo "install.sh: $b is missing; build first: bazel build //ps:pstrain-ps //worker:pstrain-worker" >&2
    exit 1
  fi
done

# The cluster's addresses, checked (and host names resolved) before anything is installed.
IP_LIST=
if [ "${#cluster_ips[@]}" -gt 0 ] || [ -n "$tf_config" ]; then
  IP_LIST=$(allow_list) || exit 2
fi

run install -D -m 0755 "$PS_BIN" "$destdir$bindir/pstrain-ps"
echo "installed  $destdir$bindir/pstrain-ps"
run install -D -m 0755 "$WORKER_BIN" "$destdir$bindir/pstrain-worker"
echo "installed  $destdir$bindir/pstrain-worker"
if [ -f "$CUDA_LIB" ]; then
  run install -D -m 0755 "$CUDA_LIB" "$destdir$libdir/libpstrain_cuda.so"
  echo "installed  $destdir$libdir/libpstrain_cuda.so"
else
  echo "skipped    libpstrain_cuda.so (not built: workers will train on the CPU only)"
fi
# The worker also finds the CUDA backend through the loader path when run by hand.
if [ -f "$CUDA_LIB" ] && [ -z "$destdir" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
  run ldconfig
fi
install_unit "$here/systemd/pstrain-ps.service"
install_unit "$here/systemd/pstrain-worker@.service"
install_ip_dropins
install_tls
run install -D -m 0644 "$here/README.md" "$destdir$docdir/README.md"
echo "installed  $destdir$docdir/README.md"
install_config "$here/ps.conf"
install_config "$here/worker.conf"
install_secret
reload_systemd
cat <<EOF

Next: edit $sysconfdir/ps.conf (listen, workers, epochs) on the ps host and
$sysconfdir/worker.conf (ps = HOST:PORT) on each worker host, copy $sysconfdir/secret from
one host to all the others (same file everywhere, mode 0600) (for mutual TLS, run this again
on each host with --tls-cert, --tls-key and --tls-ca: its certificate and key, the cluster's
CA), then
  systemctl enable --now pstrain-ps.service              # on the ps host
  systemctl enable --now pstrain-worker@0.service        # on a worker host, one per GPU (or @cpu0)
EOF
if [ "$IP_NOTE" = 1 ]; then
  cat <<EOF
The units exchange IP packets only with loopback, link-local and private addresses
(10/8, 172.16/12, 192.168/16, fc00::/7). For a cluster on other addresses, or a DNS server
on one, run this again with --cluster-ips ADDR,... or --tf-config @FILE.
EOF
fi
