# Sourced by tools/gpu/check.sh and serve.sh. carried_moetier DIR: a moetier built on the
# dev machine (tools/gpu/carry_bin.sh) for exactly the sources of this tree is copied into
# the build folder DIR instead of compiled there (minutes of device time on a fresh
# machine); false (build it) when there is none, its stamp is stale or a library is missing.
carried_moetier() {
  local c=.gpu-carry/bin dir=$1
  # packed with xz by carry_bin.sh (a call carries 64 MiB at most)
  [ -f $c/moetier.xz ] && [ ! -x $c/moetier ] && xz -dc $c/moetier.xz >$c/moetier && chmod +x $c/moetier
  [ -x $c/moetier ] && [ -f $c/STAMP ] || return 1
  if [ "$(cat $c/STAMP)" != "$(bash tools/gpu/source_stamp.sh)" ]; then echo "carried moetier: stale stamp, building"; return 1; fi
  if ldd $c/moetier | grep -q 'not found'; then echo "carried moetier: libraries missing, building"; return 1; fi
  mkdir -p "$dir" && cp $c/moetier "$dir/moetier" && echo "=== moetier: carried (sources $(cat $c/STAMP))"
}
