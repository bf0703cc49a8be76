#!/usr/bin/env bash
# Sets up a local container engine that serves the Docker API, so the real
# `docker` CLI works on this Debian machine without a Docker daemon and
# without any image registry, then builds the test images locally.
#
#   - installs (only what is missing): podman, runc, busybox-static and,
#     if `docker` is not on PATH, Debian's docker client package
#   - writes /etc/containers/containers.conf
#   - starts `podman system service` on a fixed socket (see SOCK below),
#     detached, unless something already answers there
#   - imports the images bae-test/busybox:latest and bae-test/subagent:latest
#     (rebuilt only when missing or when their inputs changed)
#
# Usage: testkit/container-engine.sh [--check] [--restart]
#   --check    also run a short end-to-end smoke test with the docker CLI
#   --restart  restart the service (only one this script started), e.g. to
#              pick up a changed containers.conf (containers survive it,
#              docker exec streams in flight are cut)
# Idempotent; a second run takes about a second. Exits non-zero on failure.
# Then: export DOCKER_HOST=unix:///run/bae-podman/podman.sock
# Details: testkit/fixtures/containers/README.md
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
FIXTURES="$HERE/fixtures/containers"
SOCK_DIR=/run/bae-podman
SOCK="$SOCK_DIR/podman.sock"
LOG="$SOCK_DIR/podman-service.log"
PIDFILE="$SOCK_DIR/podman-service.pid"
CONF_SHA="$SOCK_DIR/podman-service.conf.sha256" # of the config it started with
BUSYBOX_IMAGE=bae-test/busybox:latest
SUBAGENT_IMAGE=bae-test/subagent:latest
START_TIMEOUT=${BAE_PODMAN_START_TIMEOUT:-60}
export DOCKER_HOST="unix://$SOCK"

CHECK=0
RESTART=0
for a in "$@"; do
  case "$a" in
    --check) CHECK=1 ;;
    --restart) RESTART=1 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "container-engine: unknown argument: $a" >&2; exit 2 ;;
  esac
done

say() { echo "container-engine: $*"; }
die() { echo "container-engine: ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (installs packages, runs rootful podman)"

# ---------------------------------------------------------------- packages
pkg_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}
apt_updated=0
apt_update_once() {
  if [ "$apt_updated" = 0 ]; then
    say "apt-get update"
    apt-get update -q >/tmp/bae-container-engine-apt.log 2>&1 ||
      { tail -n 20 /tmp/bae-container-engine-apt.log >&2; die "apt-get update failed"; }
    apt_updated=1
  fi
}
apt_candidate() { # prints the candidate version of $1, empty if none
  apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { if ($2 != "(none)") print $2 }'
}

# netavark + aardvark-dns + iptables: podman's network stack for the default
# bridge network (without iptables every `run` fails, and through the API it
# hangs); catatonit: `--init`. Recommends are not installed.
want=(podman runc busybox-static netavark aardvark-dns iptables catatonit)
missing=()
for p in "${want[@]}"; do pkg_installed "$p" || missing+=("$p"); done
need_docker=0
command -v docker >/dev/null 2>&1 || need_docker=1

if [ "${#missing[@]}" -gt 0 ] || [ "$need_docker" = 1 ]; then
  apt_update_once
  if [ "$need_docker" = 1 ]; then
    # Debian 13+ has the client alone as docker-cli; Debian 12 only has
    # docker.io (client + daemon; the daemon is not started, see below).
    if [ -n "$(apt_candidate docker-cli)" ]; then
      missing+=(docker-cli)
    elif [ -n "$(apt_candidate docker.io)" ]; then
      missing+=(docker.io)
    else
      die "no Debian package provides the docker client (tried docker-cli, docker.io)"
    fi
  fi
  say "apt-get install ${missing[*]}"
  # Keep package scripts from starting daemons (dockerd, containerd).
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${missing[@]}" >/tmp/bae-container-engine-apt.log 2>&1 || rc=$?
  [ "$made_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
  if [ "$rc" != 0 ]; then
    tail -n 30 /tmp/bae-container-engine-apt.log >&2
    die "apt-get install failed (full log: /tmp/bae-container-engine-apt.log)"
  fi
else
  say "packages present (${want[*]}, docker)"
fi
command -v podman >/dev/null || die "podman not on PATH after install"
command -v docker >/dev/null || die "docker not on PATH after install"
[ -x /bin/busybox ] || die "/bin/busybox missing (package busybox-static)"

# ------------------------------------------------------------------ config
# install_conf FILE: writes stdin to FILE unless FILE already has exactly
# that content; an existing different FILE not written by this script is
# kept as FILE.bae-backup.<timestamp>.
install_conf() {
  local file=$1 new
  new=$(cat)
  if [ -f "$file" ] && [ "$(cat "$file")" = "$new" ]; then
    return 0
  fi
  mkdir -p "$(dirname "$file")"
  if [ -f "$file" ] && ! head -n 1 "$file" | grep -q '^# Written by testkit/container-engine.sh'; then
    cp -p "$file" "$file.bae-backup.$(date +%Y%m%d%H%M%S)"
    say "replacing $file (previous one backed up beside it as $(basename "$file").bae-backup.*)"
  else
    say "writing $file"
  fi
  printf '%s\n' "$new" >"$file"
}
install_conf /etc/containers/containers.conf <<'EOF'
# Written by testkit/container-engine.sh (bae test kit).
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
# Each `docker exec` leaves a conmon process (~1.6 MB) that keeps the exec
# session's exit code for this long; Docker's (and the default) is 300 s.
exit_command_delay = 30

[network]
network_backend = "netavark"
EOF
# registries.conf is left as Debian ships it: no registry is reachable and
# none is needed; a pull of a missing image fails in well under a second
# (DNS lookup of registry-1.docker.io fails), see README.md.

# ----------------------------------------------------------------- service
# dk SECONDS ARGS...: docker with a time limit (the CLI ignores SIGTERM
# while it waits on the API, hence the KILL after 5 more seconds).
dk() { local t=$1; shift; timeout -k 5 "$t" docker "$@"; }
answers() { dk 10 version --format '{{.Server.Version}}' >/dev/null 2>&1; }

mkdir -p "$SOCK_DIR"
STARTED=0
conf_sha() { sha256sum /etc/containers/containers.conf | cut -d' ' -f1; }
alive() { # pid $1 exists and is not a zombie (PID 1 here may reap late)
  [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null
}
our_pid() { # prints the pid of the service this script started, if alive
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
    grep -q "podman system service .*unix://$SOCK" && echo "$pid"
}
up=0
answers && up=1
# Ours but started from a directory since deleted (a removed checkout or
# worktree): it still answers `version`, but conmon cannot use its working
# directory and every container start hangs. Restart it.
if [ "$up" = 1 ] && pid=$(our_pid) && readlink "/proc/$pid/cwd" | grep -q ' (deleted)$'; then
  say "podman service (pid $pid) runs in a deleted directory; restarting it"
  RESTART=1
fi
if [ "$up" = 1 ]; then
  if [ "$RESTART" = 1 ]; then
    pid=$(our_pid) || die "--restart: the service on $SOCK was not started by this script; stop it yourself"
    say "restarting podman service (pid $pid)"
  elif [ "$(cat "$CONF_SHA" 2>/dev/null)" != "$(conf_sha)" ]; then
    say "WARNING: the running service was started with another containers.conf (or not by this script); restart it: $0 --restart"
  else
    say "podman service already answers on $SOCK"
  fi
fi
if pid=$(our_pid) && { [ "$RESTART" = 1 ] || [ "$up" = 0 ]; }; then
  # Ours, from an earlier run: asked to restart, or hung.
  [ "$RESTART" = 1 ] || say "podman service (pid $pid) does not answer; restarting it"
  kill "$pid" || true
  for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
  if alive "$pid"; then kill -9 "$pid" || true; sleep 0.5; fi
  up=0
fi
if [ "$up" = 0 ]; then
  rm -f "$SOCK"
  say "starting podman system service on $SOCK (log: $LOG)"
  # From /, so that no checkout's directory outlives it (see above).
  (cd / && exec setsid nohup podman system service --time=0 "unix://$SOCK" </dev/null >>"$LOG" 2>&1) &
  echo $! >"$PIDFILE"
  conf_sha >"$CONF_SHA"
  STARTED=1
  deadline=$((SECONDS + START_TIMEOUT))
  until answers; do
    if ! alive "$(cat "$PIDFILE")"; then
      tail -n 20 "$LOG" >&2
      die "podman service exited (log: $LOG)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 20 "$LOG" >&2
      die "podman service did not answer on $SOCK within ${START_TIMEOUT}s (log: $LOG)"
    fi
    sleep 0.2
  done
fi
# After a start (e.g. all processes of an earlier run were killed), drop
# containers of our images whose process is gone: podman still lists them
# as running until something touches them.
if [ "$STARTED" = 1 ]; then
  stale=()
  for c in $(dk 10 ps -q --no-trunc --filter label=bae.testkit --filter status=running); do
    pid=$(dk 10 inspect --format '{{.State.Pid}}' "$c" 2>/dev/null || echo 0)
    { [ "$pid" -gt 0 ] 2>/dev/null && alive "$pid"; } || stale+=("$c")
  done
  if [ "${#stale[@]}" -gt 0 ]; then
    say "removing ${#stale[@]} stale container(s) whose process is gone"
    # The first rm of such a container may leave it "Stopping"; a second
    # one removes it (and only complains about those already gone).
    for _ in 1 2; do dk 60 rm -f "${stale[@]}" >/dev/null 2>&1 || true; done
  fi
fi
say "$(dk 10 version --format 'docker client {{.Client.Version}}, server {{.Server.Version}} (API {{.Server.APIVersion}})')"

# ------------------------------------------------------------------ images
# An image carries a label with the hash of its inputs; it is rebuilt when
# missing or when that hash changed.
image_hash() { dk 10 image inspect --format '{{index .Config.Labels "bae.testkit.hash"}}' "$1" 2>/dev/null || true; }

# make_rootfs DIR: a minimal busybox root file system.
make_rootfs() {
  local r=$1 applet
  mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,root,tmp,proc,sys,dev,run,var/tmp,home}
  chmod 1777 "$r/tmp" "$r/var/tmp"
  chmod 0700 "$r/root"
  cp /bin/busybox "$r/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$r/bin/$applet"
  done
  ln -sf ../../bin/env "$r/usr/bin/env"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
}

# import_rootfs DIR TAG HASH
import_rootfs() {
  local dir=$1 tag=$2 hash=$3
  tar --numeric-owner --owner=0 --group=0 -C "$dir" -cf "$dir.tar" .
  timeout -k 5 120 podman import --quiet \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin' \
    --change 'CMD ["/bin/sh"]' \
    --change 'WORKDIR /' \
    --change 'LABEL bae.testkit=1' \
    --change "LABEL bae.testkit.hash=$hash" \
    "$dir.tar" "$tag" >/dev/null ||
    die "podman import of $tag failed"
}

# Inputs: the busybox binary and the two functions above; for the subagent
# image also the fake CLI.
bb_hash=$( { sha256sum /bin/busybox; declare -f make_rootfs import_rootfs; } | sha256sum | cut -c1-16)
sa_hash=$( { echo "$bb_hash"; cat "$FIXTURES/fake-subagent.sh"; } | sha256sum | cut -c1-16)

work=""
cleanup() { [ -z "$work" ] || rm -rf "$work"; }
trap cleanup EXIT

if [ "$(image_hash "$BUSYBOX_IMAGE")" = "$bb_hash" ]; then
  say "image $BUSYBOX_IMAGE up to date"
else
  say "building image $BUSYBOX_IMAGE"
  work=${work:-$(mktemp -d /tmp/bae-images.XXXXXX)}
  make_rootfs "$work/busybox"
  import_rootfs "$work/busybox" "$BUSYBOX_IMAGE" "$bb_hash"
fi

if [ "$(image_hash "$SUBAGENT_IMAGE")" = "$sa_hash" ]; then
  say "image $SUBAGENT_IMAGE up to date"
else
  say "building image $SUBAGENT_IMAGE"
  work=${work:-$(mktemp -d /tmp/bae-images.XXXXXX)}
  make_rootfs "$work/subagent"
  install -m 0755 "$FIXTURES/fake-subagent.sh" "$work/subagent/usr/local/bin/claude"
  install -m 0755 "$FIXTURES/fake-subagent.sh" "$work/subagent/usr/local/bin/codex"
  import_rootfs "$work/subagent" "$SUBAGENT_IMAGE" "$sa_hash"
fi

for img in "$BUSYBOX_IMAGE" "$SUBAGENT_IMAGE"; do
  dk 10 image inspect "$img" >/dev/null 2>&1 || die "image $img not visible through the Docker API"
done
# Old versions of our images lose their tag on rebuild; drop them.
dangling=$(podman images -q --filter dangling=true --filter label=bae.testkit 2>/dev/null || true)
# shellcheck disable=SC2086 # one id per word
[ -z "$dangling" ] || timeout -k 5 60 podman rmi $dangling >/dev/null 2>&1 || true

# ------------------------------------------------------------- smoke test
# Always after (re)starting the service; on every run with --check.
if [ "$CHECK" = 1 ] || [ "$STARTED" = 1 ]; then
  say "smoke test: docker run/exec/stop"
  id=$(dk 60 run -d --rm --label bae.testkit.check=1 "$SUBAGENT_IMAGE" sleep infinity) ||
    die "docker run failed (service log: $LOG)"
  rc=0
  out=$(printf 'hi' | dk 30 exec -i "$id" claude -p x 2>&1) || rc=$?
  dk 30 stop -t 0 "$id" >/dev/null || die "docker stop failed"
  [ "$rc" = 0 ] || die "docker exec failed (exit $rc): $out"
  [ "$out" = $'arg: -p\narg: x\nstdin: hi' ] || die "unexpected fake CLI output: $out"
  say "smoke test ok"
fi

say "ready. export DOCKER_HOST=unix://$SOCK"
