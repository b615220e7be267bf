# The job runner of `shared::jobs::over_exec`: POSIX sh with GNU coreutils or BusyBox
# (and util-linux's `setsid -f` and `fallocate` where present).
# Run as `sh -c RUNNER msc-job MODE ARGS...`:
#   start JOB TIMEOUT_S CMD_B64 PROGRAM...
#   poll JOB WAIT_MS UNTIL_EXIT MAX SIGNAL CLOSE HAS_STDIN   (stdin: base64 to write)
#   peek JOB SIGNAL MAX   (the newest MAX bytes of each stream, read or not; takes nothing)
#   list
#   end
# Each job has a directory: its stdin is a FIFO kept open until closed, its streams are
# plain files the program writes itself (so output shows at once), read by offset. A poll
# prints a status line, the new stdout and stderr as base64 with a "." line between them.
# Refusals: a line "msc:<reason>" on stderr and an exit status of 40 or more.
set -u
b=/tmp/.msc-jobs
mode=$1
shift
now_ms() {
  v=$(date +%s%3N 2>/dev/null)
  case $v in '' | *[!0-9]*) v=$(($(date +%s) * 1000)) ;; esac
  echo "$v"
}
boot() { cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo -; }
# Does the job's session leader still run (not a zombie)? It dies only with its group.
leads() {
  if [ -d /proc/self ]; then
    z=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$z" ] && [ "$z" != Z ]
  else
    kill -0 "$1" 2>/dev/null
  fi
}
# How job $d stands: st (running|ended), code, tmo (t|-), dur (ms).
state() {
  st=running code=0 tmo=- dur=0
  if [ -e "$d/fin" ]; then
    read -r code tmo dur < "$d/fin"
    st=ended
    return
  fi
  pg=$(cat "$d/pid" 2>/dev/null) || pg=
  [ -n "$pg" ] || return
  # The leader writes rc before it exits: look at rc only once it is seen gone.
  if [ ! -e "$d/rc" ] && [ "$(cat "$d/boot")" = "$(boot)" ] && leads "$pg"; then
    return
  fi
  if [ -e "$d/rc" ]; then
    read -r code e < "$d/rc"
    dur=$((e - $(cat "$d/s0")))
  else
    # Ended without its status: a signal, its timeout, or the computer restarted.
    if [ -e "$d/timedout" ]; then
      code=124 tmo=$(cat "$d/limit")
    elif [ -e "$d/sig" ]; then
      code=$((128 + $(cat "$d/sig")))
    else
      code=137
    fi
    dur=$(($(now_ms) - $(cat "$d/s0" 2>/dev/null || now_ms)))
  fi
  [ "$dur" -ge 0 ] || dur=0
  echo "$code $tmo $dur" > "$d/fin.tmp" && mv -f "$d/fin.tmp" "$d/fin"
  st=ended
}
size() { wc -c < "$d/$1" 2>/dev/null || echo 0; }
# Sends signal $1 (unless 0) to job $d's whole process group while it runs.
signal() {
  if [ "$1" != 0 ] && [ ! -e "$d/rc" ] && [ ! -e "$d/fin" ]; then
    echo "$1" > "$d/sig"
    kill "-$1" "-$(cat "$d/pid")" 2>/dev/null
  fi
}
# Ended jobs go 10 minutes after their end.
tidy() {
  for d in "$b"/job-*; do
    [ -d "$d" ] || continue
    state
    if [ $st = ended ] && [ -n "$(find "$d/fin" -mmin +10 2>/dev/null)" ]; then rm -rf "$d"; fi
  done
}
case $mode in
start)
  j=$1 t=$2 cmd=$3
  shift 3
  mkdir -p -m 700 "$b" || exit 46
  tidy
  n=0
  for x in "$b"/job-*; do [ -d "$x" ] && n=$((n + 1)); done
  if [ $n -ge 64 ]; then echo msc:too_many >&2; exit 47; fi
  d=$b/$j
  mkdir -m 700 "$d" 2>/dev/null || { echo msc:exists >&2; exit 45; }
  echo "$cmd" > "$d/cmd"
  now_ms > "$d/t0"
  echo "$t" > "$d/limit"
  boot > "$d/boot"
  : > "$d/o"
  : > "$d/e"
  mkfifo "$d/in" || { rm -rf "$d"; exit 46; }
  # The job's session. Its leader outlives the signals sent to the group (its program
  # gets them with the default action), a keeper holds stdin open until it is closed,
  # and a watchdog ends the whole group at the timeout and, each second, frees all but
  # the newest 8 MiB (+ a margin for a read under way) of each stream's file.
  run='d=$1 t=$2; shift 2
now_ms() { v=$(date +%s%3N 2>/dev/null); case $v in "" | *[!0-9]*) v=$(($(date +%s) * 1000));; esac; echo "$v"; }
now_ms > "$d/s0"
sigs="1 2 3 10 12 13 14 15"
trap : $sigs
(trap "" $sigs; exec sleep "$t") 1<> "$d/in" &
echo $! > "$d/keep"
(
  trap "" $sigs
  i=0
  while [ $i -lt "$t" ]; do
    [ -e "$d/rc" ] && exit 0
    sleep 1
    i=$((i + 1))
    for s in o e; do
      z=$(wc -c < "$d/$s")
      [ "$z" -gt 41943040 ] && fallocate -p -o 0 -l $((z - 41943040)) "$d/$s" 2>/dev/null
    done
  done
  : > "$d/timedout"
  kill -KILL 0
) &
(
  trap - $sigs
  echo $$ > "$d/pid.tmp" && mv -f "$d/pid.tmp" "$d/pid"
  # A session started from a background job ignores SIGINT, and one under nohup SIGHUP,
  # which no trap undoes (a signal ignored on entry stays ignored); GNU env gives the
  # program every signal with its default action.
  if env --default-signal true 2> /dev/null; then exec env --default-signal "$@"; fi
  exec "$@"
) < "$d/in" > "$d/o" 2> "$d/e"
r=$?
echo "$r $(now_ms)" > "$d/rc.tmp" && mv -f "$d/rc.tmp" "$d/rc"
kill -KILL $(cat "$d/keep" "$d/wps" 2>/dev/null) 2>/dev/null'
  if setsid --help 2>&1 | grep -q -- --fork; then
    setsid -f sh -c "$run" msc-job "$d" "$t" "$@" < /dev/null > /dev/null 2>&1
  else
    # Without `setsid -f` the session starts in the background, where sh ignores SIGINT.
    setsid sh -c "$run" msc-job "$d" "$t" "$@" < /dev/null > /dev/null 2>&1 &
  fi
  i=0
  while [ ! -e "$d/pid" ] && [ $i -lt 400 ]; do sleep 0.005; i=$((i + 1)); done
  [ -e "$d/pid" ] || { echo msc:no_start >&2; exit 46; }
  echo started
  ;;
poll)
  j=$1 w=$2 ux=$3 max=$4 sig=$5 cl=$6 hs=$7
  d=$b/$j
  [ -d "$d" ] || { echo msc:no_job >&2; exit 41; }
  # stdin is written in the background, in order, so a job that does not read it never
  # blocks a call; the job's end kills writers still waiting.
  if [ "$hs" = 1 ] && [ -e "$d/closed" ]; then echo msc:stdin_closed >&2; exit 44; fi
  if [ "$hs" = 1 ]; then
    n=$(($(cat "$d/wn" 2>/dev/null || echo 0) + 1))
    echo $n > "$d/wn"
    base64 -d > "$d/w.$n" || exit 46
    p=$(cat "$d/wp" 2>/dev/null) || p=
    (
      while [ -n "$p" ] && kill -0 "$p" 2>/dev/null; do sleep 0.01; done
      [ -e "$d/rc" ] || cat "$d/w.$n" 1<> "$d/in"
      rm -f "$d/w.$n"
    ) < /dev/null > /dev/null 2>&1 &
    echo $! > "$d/wp"
    echo $! >> "$d/wps"
  fi
  if [ "$cl" = 1 ] && [ ! -e "$d/closed" ]; then
    : > "$d/closed"
    p=$(cat "$d/wp" 2>/dev/null) || p=
    (
      while [ -n "$p" ] && kill -0 "$p" 2>/dev/null; do sleep 0.01; done
      kill -KILL "$(cat "$d/keep")" 2>/dev/null
    ) < /dev/null > /dev/null 2>&1 &
  fi
  signal "$sig"
  co=$(cat "$d/o.c" 2>/dev/null) || co=0
  ce=$(cat "$d/e.c" 2>/dev/null) || ce=0
  # Wait for news (with UNTIL_EXIT, for the end): every 5 ms at first, then every 50 ms.
  i=0 left=$w
  while :; do
    state
    [ $st = ended ] && break
    if [ "$ux" = 0 ] && { [ "$(size o)" -gt "$co" ] || [ "$(size e)" -gt "$ce" ]; }; then break; fi
    [ "$left" -gt 0 ] || break
    if [ $i -lt 20 ]; then
      sleep 0.005
      left=$((left - 5))
    else
      sleep 0.05
      left=$((left - 50))
    fi
    i=$((i + 1))
  done
  wo=$(size o) we=$(size e)
  # The newest 8 MiB of each stream are kept for the reader; older bytes are dropped.
  dropped=0
  if [ $((wo - co)) -gt 8388608 ]; then dropped=$((wo - 8388608 - co)) co=$((wo - 8388608)); fi
  if [ $((we - ce)) -gt 8388608 ]; then dropped=$((dropped + we - 8388608 - ce)) ce=$((we - 8388608)); fi
  no=$((wo - co)) ne=$((we - ce))
  [ $no -le "$max" ] || no=$max
  [ $ne -le $((max - no)) ] || ne=$((max - no))
  [ $st = ended ] && [ $((wo - co - no + we - ce - ne)) = 0 ] || st=running
  echo "msc-job $st $code $tmo $dropped $dur $no $ne"
  tail -c +$((co + 1)) "$d/o" | head -c $no | base64
  echo .
  tail -c +$((ce + 1)) "$d/e" | head -c $ne | base64
  if [ $st = ended ]; then
    rm -rf "$d"
  else
    echo $((co + no)) > "$d/o.c"
    echo $((ce + ne)) > "$d/e.c"
  fi
  ;;
peek)
  j=$1 sig=$2 max=$3
  d=$b/$j
  [ -d "$d" ] || { echo msc:no_job >&2; exit 41; }
  signal "$sig"
  state
  wo=$(size o) we=$(size e)
  no=$wo ne=$we
  [ $no -le "$max" ] || no=$max
  [ $ne -le "$max" ] || ne=$max
  echo "msc-job $st $code $tmo 0 $dur $no $ne"
  tail -c +$((wo - no + 1)) "$d/o" | head -c $no | base64
  echo .
  tail -c +$((we - ne + 1)) "$d/e" | head -c $ne | base64
  ;;
list)
  [ -d "$b" ] || exit 0
  tidy
  for d in "$b"/job-*; do
    [ -d "$d" ] || continue
    state
    echo "${d##*/} $(cat "$d/t0") $st $code $(cat "$d/cmd")"
  done
  ;;
end)
  # Ends every job with its group (restart, factory reset, delete).
  for d in "$b"/job-*; do
    [ -d "$d" ] || continue
    pg=$(cat "$d/pid" 2>/dev/null) && kill -KILL "-$pg" 2>/dev/null
    kill -KILL $(cat "$d/wps" 2>/dev/null) 2>/dev/null
  done
  rm -rf "$b"
  ;;
*)
  echo "msc:mode $mode" >&2
  exit 49
  ;;
esac
