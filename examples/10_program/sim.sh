#!/bin/sh
# sim.sh THETA0 THETA1 SEED: x = theta + N(0, 0.1^2) per component, drawn from SEED.
# Kestrel runs it once per sample (kestrel_core.Program, config.yml) and reads x from stdout.
# Stands for any program: a compiled code, a script around one; it is not Python.
awk -v a="$1" -v b="$2" -v seed="$3" 'BEGIN {
  srand(seed)
  r = sqrt(-2 * log(1 - rand())); phi = 6.283185307179586 * rand()  # Box-Muller
  printf "%.17g %.17g\n", a + 0.1 * r * cos(phi), b + 0.1 * r * sin(phi)
}'
