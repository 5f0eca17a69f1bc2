#!/bin/sh
# plot-timeline.sh - plot a `tessera loadgen --timeline` CSV as a PNG.
#
# usage: scripts/plot-timeline.sh TIMELINE.csv OUT.png
#
# Left axis: the pool load. Right axis: active clients, pool devices and
# running sequences, with each scale-up (triangle up) and scale-down
# (triangle down) drawn where the sample counted it, at the device count.
# Needs gnuplot (pngcairo when it has it, else png).
set -eu

usage() {
  echo "usage: $0 TIMELINE.csv OUT.png" >&2
  exit 2
}

[ "$#" -eq 2 ] || usage
csv=$1
png=$2
[ -r "$csv" ] || { echo "plot-timeline: cannot read $csv" >&2; exit 1; }
command -v gnuplot >/dev/null 2>&1 || {
  echo "plot-timeline: gnuplot not found (apt-get install gnuplot-nox)" >&2
  exit 1
}
header='t_s,clients,load,pool_devices,queue_depth,running,scale_up,scale_down'
if [ "$(head -n 1 "$csv" | tr -d '\r')" != "$header" ]; then
  echo "plot-timeline: $csv does not start with the header $header" >&2
  exit 1
fi

tmp=$(mktemp "${TMPDIR:-/tmp}/plot-timeline.XXXXXX")
trap 'rm -f "$tmp"' EXIT INT TERM

# Whitespace-separated columns for gnuplot: t clients load devices running
# up_marker down_marker, NaN where a sample is missing or nothing happened.
awk -F, 'NR > 1 {
  for (i = 1; i <= 8; i++) if ($i == "") $i = "NaN"
  up = "NaN"; down = "NaN"
  if ($7 != "NaN") { if (seen && $7 > last_up) up = $4; last_up = $7 }
  if ($8 != "NaN") { if (seen && $8 > last_down) down = $4; last_down = $8 }
  if ($7 != "NaN" || $8 != "NaN") seen = 1
  print $1, $2, $3, $4, $6, up, down
}' "$csv" >"$tmp"
[ -s "$tmp" ] || { echo "plot-timeline: $csv has no samples" >&2; exit 1; }

# Only series with a point to draw (gnuplot warns about empty ones).
has() { awk -v c="$1" '$c != "NaN" { found = 1 } END { exit !found }' "$tmp"; }
series="'$tmp' using 1:3 with lines lw 2 title 'load'"
series="$series, '' using 1:2 axes x1y2 with steps lw 2 title 'clients'"
has 4 && series="$series, '' using 1:4 axes x1y2 with steps lw 2 title 'pool devices'"
has 5 && series="$series, '' using 1:5 axes x1y2 with lines dt 2 title 'running'"
has 6 && series="$series, '' using 1:6 axes x1y2 with points pt 9 ps 2 title 'scale up'"
has 7 && series="$series, '' using 1:7 axes x1y2 with points pt 11 ps 2 title 'scale down'"

if gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo; then
  term='pngcairo size 1200,600 enhanced font ",10"'
else
  term='png size 1200,600'
fi

gnuplot <<GP
set terminal $term
set output '$png'
set datafile missing 'NaN'
set title 'tessera loadgen timeline'
set xlabel 'time (s)'
set ylabel 'pool load'
set y2label 'clients, devices, sequences'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set key outside right top
set grid
plot $series
GP
echo "plot-timeline: wrote $png"
