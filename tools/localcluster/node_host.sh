# shellcheck shell=bash
# node_host.sh - what nodes change on the host (sysctls, iptables, cgroups, mounts)
# and each node's network: saved, set up, cleaned up.
# (sourced by tools/localcluster/node.sh: its globals, select_node's variables
# and helpers are in scope; shellcheck reads it with node.sh's names unknown)

# ---------------------------------------------------------------------------
# host state saved at the first node's up, restored by the last node's down
# ---------------------------------------------------------------------------
save_host_state() {
  local s
  [ -d "$HOST_SAVED" ] && return 0
  mkdir -p "$HOST_SAVED"
  : >"$HOST_SAVED/sysctl"
  for s in "${SYSCTLS[@]}"; do
    if [ -e "/proc/sys/${s//.//}" ]; then echo "$s=$(cat "/proc/sys/${s//.//}")" >>"$HOST_SAVED/sysctl"; fi
  done
  ls /var/run/netns 2>/dev/null | sort >"$HOST_SAVED/netns" || true
  for s in "${HOST_PATHS[@]}"; do
    if [ -e "$s" ]; then echo "$s"; fi
  done >"$HOST_SAVED/paths"
}

restore_sysctls() {
  [ -f "$HOST_SAVED/sysctl" ] || return 0
  local line
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    sysctl -q -w "$line" >/dev/null 2>&1 || log "could not restore sysctl $line"
  done <"$HOST_SAVED/sysctl"
}

cleanup_ipsets() { # kube-router's ipsets (KUBE-*; iptables rules using them are gone first)
  command -v ipset >/dev/null || return 0
  local set
  for set in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)' || true); do
    ipset destroy "$set" 2>/dev/null || log "could not destroy ipset $set"
  done
}

cleanup_iptables() { # removes the KUBE-* and CNI-* chains and every rule that jumps to them
  local ipt t chains c line
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in filter nat mangle raw; do
      "$ipt-save" -t "$t" >/dev/null 2>&1 || continue
      while IFS= read -r line; do
        eval "$ipt -w -t $t -D ${line#-A }" 2>/dev/null || true
      done < <("$ipt-save" -t "$t" | grep -E '^-A ' | grep -E -- '-j (KUBE-|CNI-)' | grep -vE '^-A (KUBE-|CNI-)')
      chains=$("$ipt-save" -t "$t" | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p')
      for c in $chains; do "$ipt" -w -t "$t" -F "$c" 2>/dev/null || true; done
      for c in $chains; do "$ipt" -w -t "$t" -X "$c" 2>/dev/null || true; done
    done
  done
}

kill_cgroup_tree() { # name (kubepods, or a node's cgroupRoot): SIGKILL of every process in it
  local h pid _
  for _ in 1 2 3; do
    for h in /sys/fs/cgroup/*/"$1" /sys/fs/cgroup/"$1"; do
      [ -d "$h" ] || continue
      for pid in $(find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u); do
        kill -KILL "$pid" 2>/dev/null || true
      done
    done
    sleep 0.2
  done
}

remove_cgroup_tree() { # name: rmdir in every hierarchy, deepest first
  local h d
  for h in /sys/fs/cgroup/*/"$1" /sys/fs/cgroup/"$1"; do
    [ -d "$h" ] || continue
    find "$h" -depth -type d | while IFS= read -r d; do
      rmdir "$d" 2>/dev/null || true
    done
    [ -d "$h" ] && log "cgroup $h could not be removed (processes left?)"
  done
  return 0
}

cleanup_cgroups() { # node 1's kubepods trees in every v1 hierarchy (and v2 if used)
  kill_cgroup_tree kubepods
  remove_cgroup_tree kubepods
}

make_cgroup_root() { # node K's cgroupRoot, in every v1 hierarchy, before its kubelet starts
  local h
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}
    [ "${h##*/}" = unified ] && continue
    [ -L "$h" ] && continue
    mkdir -p "$h/$NODE"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" >"$h/$NODE/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h/$NODE/cpuset.mems"
    fi
  done
}

unmount_under() { # every mount point below $1, deepest first
  local m
  awk -v d="$1" '{ gsub(/\\040/, " ", $5); if (index($5, d "/") == 1 || $5 == d) print $5 }' /proc/self/mountinfo |
    awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2- | while IFS= read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}

# ---------------------------------------------------------------------------
# node K's network: its namespace, the veth to the host, the routes
# ---------------------------------------------------------------------------
host_return_rule() { # add|del: the pods' RETURN rule in the host's nat table
  if iptables -w -t nat -C "${RETURN_RULE[@]}" 2>/dev/null; then
    [ "$1" = del ] && iptables -w -t nat -D "${RETURN_RULE[@]}"
  elif [ "$1" = add ]; then
    # Ahead of the bridge's per-pod masquerade rules (CNI-*, appended per
    # pod), behind kube-proxy's KUBE-POSTROUTING jump (prepended: Service
    # traffic is still masqueraded, hairpin included).
    local pos
    pos=$(iptables -w -t nat -S POSTROUTING | grep -E '^-A ' | grep -n -- '-j CNI-' | head -1 | cut -d: -f1 || true)
    if [ -n "$pos" ]; then
      iptables -w -t nat -I "${RETURN_RULE[0]}" "$pos" "${RETURN_RULE[@]:1}"
    else
      iptables -w -t nat -A "${RETURN_RULE[@]}"
    fi
  fi
  return 0
}

net_up() {
  ((IDX > 1)) || return 0
  if ! mountpoint -q "$N/netns" 2>/dev/null; then
    : >"$N/netns"
    unshare --net="$N/netns" true
  fi
  ip link del "$VETH" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while ip link show "$VETH" >/dev/null 2>&1; do # a namespace going away takes its veth with it, later
    ((SECONDS < deadline)) || die "link $VETH stays"
    sleep 0.2
  done
  # created inside, its host end moved to the host's namespace (this shell's)
  "${IN[@]}" ip link add eth0 type veth peer name "$VETH" netns $$
  ip addr add "$LINK_GW/24" dev "$VETH"
  ip link set "$VETH" up
  "${IN[@]}" ip link set lo up
  "${IN[@]}" ip addr add "$NODE_IP/24" dev eth0
  "${IN[@]}" ip link set eth0 up
  "${IN[@]}" ip route add default via "$LINK_GW"
  "${IN[@]}" sysctl -q -w net.ipv4.ip_forward=1 >/dev/null
  "${IN[@]}" iptables -w -t nat -A "${RETURN_RULE[@]}"
  sysctl -q -w net.ipv4.ip_forward=1 >/dev/null
  ip route replace "$POD_SUBNET" via "$NODE_IP" dev "$VETH"
  host_return_rule add
}

net_down() {
  ((IDX > 1)) || return 0
  ip route del "$POD_SUBNET" 2>/dev/null || true
  ip link del "$VETH" 2>/dev/null || true
  if mountpoint -q "$N/netns" 2>/dev/null; then umount "$N/netns" 2>/dev/null || umount -l "$N/netns" || true; fi
  rm -f "$N/netns"
}

netns_pids() { # processes inside node K's network namespace
  local ino pid
  mountpoint -q "$N/netns" 2>/dev/null || return 0
  ino=$(stat -L -c %i "$N/netns" 2>/dev/null) || return 0
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [ "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" = "$ino" ] && echo "$pid"
  done
  return 0
}
