/*
 * bench_plot.c - the charts of `tessera bench --plot DIR` (see bench_cli.h).
 *
 * Each chart is three files in DIR: NAME.dat (the figures the table
 * printed, whitespace-separated, NaN where there is none), NAME.gp (a
 * gnuplot script that reads NAME.dat from its own directory) and NAME.png,
 * which `cd DIR && gnuplot NAME.gp` writes again from the other two.
 */
#include "bench_cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/src/bench.h"

#define GNUPLOT_TIMEOUT_S 60.0

/* mkdir -p */
static bool make_dirs(const char *dir, char *why, size_t cap) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
    snprintf(why, cap, "the path is too long");
    return false;
  }
  for (char *s = p + 1;; s++) {
    const bool end = *s == '\0';
    if (*s == '/' || end) {
      *s = '\0';
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        snprintf(why, cap, "cannot create '%s': %s", p, strerror(errno));
        return false;
      }
      struct stat st;
      if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, cap, "'%s' is not a directory", p);
        return false;
      }
      if (end) break;
      *s = '/';
    }
  }
  return true;
}

bool cli_plot_prepare(const char *dir) {
  char why[4200];
  if (!dir[0]) {
    fprintf(stderr, "tessera bench: --plot: empty directory name\n");
    return false;
  }
  if (!make_dirs(dir, why, sizeof why)) {
    fprintf(stderr, "tessera bench: --plot %s: %s\n", dir, why);
    return false;
  }
  /* A file that can be created there (root ignores permission bits, so
   * access(W_OK) would not tell). */
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/.tessera-bench-XXXXXX", dir);
  int fd = mkstemp(probe);
  if (fd < 0) {
    fprintf(stderr, "tessera bench: --plot %s: cannot write files there: %s\n", dir,
            strerror(errno));
    return false;
  }
  close(fd);
  unlink(probe);
  char *argv[] = {"gnuplot", "-e", "exit", NULL};
  cli_child_t c;
  if (!cli_child_run(argv, NULL, true, false, GNUPLOT_TIMEOUT_S, &c, why, sizeof why) ||
      cli_child_failed(&c, why, sizeof why)) {
    fprintf(stderr, "tessera bench: --plot: gnuplot %s (the Debian package gnuplot-nox; "
                    "scripts/setup-deps.sh installs it)\n", why);
    return false;
  }
  return true;
}

static FILE *plot_open(const char *dir, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) fprintf(stderr, "tessera bench: --plot: cannot write '%s': %s\n", path, strerror(errno));
  return f;
}

static bool plot_close(FILE *f, const char *dir, const char *name) {
  const bool bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    fprintf(stderr, "tessera bench: --plot: writing '%s/%s' failed: %s\n", dir, name,
            strerror(errno));
    return false;
  }
  return true;
}

static bool plot_render(const char *dir, const char *script) {
  char *argv[] = {"gnuplot", (char *)script, NULL};
  cli_child_t c;
  char why[512];
  if (!cli_child_run(argv, dir, true, false, GNUPLOT_TIMEOUT_S, &c, why, sizeof why) ||
      cli_child_failed(&c, why, sizeof why)) {
    fprintf(stderr, "tessera bench: --plot: gnuplot %s/%s: %s\n", dir, script, why);
    return false;
  }
  return true;
}

/* The script's head: terminal (pngcairo if gnuplot has it), output, title. */
void cli_plot_script_head(FILE *f, const char *name, const char *title, const char *caption) {
  fprintf(f,
          "# %s.png from %s.dat (written by tessera bench --plot); run in this directory:\n"
          "#   gnuplot %s.gp\n"
          "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
          "  set terminal pngcairo size 1000,660 font \",11\"\n"
          "} else {\n"
          "  set terminal png size 1000,660\n"
          "}\n"
          "set output \"%s.png\"\n"
          "set title \"%s\\n{/*0.8 %s}\"\n"
          "set grid\n"
          "set key below\n",
          name, name, name, name, title, caption);
}

/* The y axis: logarithmic when the values span more than 20x (then the
 * label says so), else linear from 0. */
static void y_axis(FILE *f, const char *label, double lo, double hi) {
  if (lo > 0 && hi / lo > 20)
    fprintf(f, "set ylabel \"%s (log scale)\"\nset logscale y\n", label);
  else
    fprintf(f, "set ylabel \"%s\"\nset yrange [0:*]\n", label);
}

static void widen(double v, double *lo, double *hi) {
  if (!(v > 0)) return;
  if (*lo == 0 || v < *lo) *lo = v;
  if (v > *hi) *hi = v;
}

static void dat_num(FILE *f, double v) {
  if (v > 0) fprintf(f, " %.6g", v);
  else fprintf(f, " NaN");
}

/* Quoted for a gnuplot string: no quotes or backslashes inside. */
static void gp_title(char *out, size_t cap, const char *s) {
  size_t o = 0;
  for (; *s && o + 1 < cap; s++) out[o++] = *s == '"' || *s == '\\' ? '_' : *s;
  out[o] = '\0';
}

bool cli_plot_models(const char *dir, const cli_plot_model_t *m, int n, const char *peer_label,
                     const char *caption) {
  FILE *f = plot_open(dir, "models.dat");
  if (!f) return false;
  fprintf(f, "# model params_millions fp32_prefill fp32_decode int8_prefill int8_decode "
             "peer_prefill peer_decode (tokens/s; NaN: not measured)\n");
  double lo = 0, hi = 0;
  /* in order of size, so the lines run left to right */
  int order[64];
  if (n > 64) n = 64;
  for (int i = 0; i < n; i++) {
    int j = i;
    for (; j > 0 && m[order[j - 1]].params_m > m[i].params_m; j--) order[j] = order[j - 1];
    order[j] = i;
  }
  for (int o = 0; o < n; o++) {
    const int i = order[o];
    fprintf(f, "%s %.6g", m[i].preset, m[i].params_m);
    dat_num(f, m[i].prefill_tps[0]), dat_num(f, m[i].decode_tps[0]);
    dat_num(f, m[i].prefill_tps[1]), dat_num(f, m[i].decode_tps[1]);
    dat_num(f, m[i].peer_prefill_tps), dat_num(f, m[i].peer_decode_tps);
    fprintf(f, "\n");
    if (!o || m[i].params_m < lo) lo = m[i].params_m;
    if (!o || m[i].params_m > hi) hi = m[i].params_m;
  }
  if (!plot_close(f, dir, "models.dat")) return false;
  if (!(f = plot_open(dir, "models.gp"))) return false;
  cli_plot_script_head(f, "models", "tokens/s vs model size (generated weights)", caption);
  fprintf(f,
          "set xlabel \"parameters (millions, log scale)\"\n"
          "set ylabel \"tokens/s (log scale)\"\n"
          "set logscale xy\n"
          "set xrange [%.6g:%.6g]\n"
          "plot \"models.dat\" using 2:3 with linespoints lw 2 pt 7 title \"fp32 prefill\", \\\n"
          "     \"\" using 2:4 with linespoints lw 2 pt 5 title \"fp32 decode\", \\\n"
          "     \"\" using 2:5 with linespoints lw 2 pt 9 title \"int8 prefill\", \\\n"
          "     \"\" using 2:6 with linespoints lw 2 pt 11 title \"int8 decode\", \\\n"
          "     \"\" using 2:6:1 with labels offset 0,1.2 noenhanced notitle",
          lo / 2, hi * 2);
  if (peer_label) {
    char t[200];
    gp_title(t, sizeof t, peer_label);
    fprintf(f,
            ", \\\n     \"\" using 2:7 with linespoints lw 2 dt 2 pt 6 title \"%s prefill\", \\\n"
            "     \"\" using 2:8 with linespoints lw 2 dt 2 pt 4 title \"%s decode\"",
            t, t);
  }
  fprintf(f, "\n");
  if (!plot_close(f, dir, "models.gp")) return false;
  return plot_render(dir, "models.gp");
}

bool cli_plot_depths(const char *dir, const cli_plot_model_t *m, int n, const char *caption) {
  FILE *f = plot_open(dir, "depth.dat");
  if (!f) return false;
  fprintf(f, "# decode tokens/s at context depth: one block per model and precision "
             "(gnuplot index), columns depth tokens_s\n");
  char titles[32][64];
  int colour[32], prec_of[32];
  int blocks = 0, max_depth = 0;
  double ylo = 0, yhi = 0;
  for (int i = 0; i < n; i++)
    for (int p = 0; p < 2; p++) {
      if (!m[i].n_depths || !m[i].depth_tps[p] || blocks == 32) continue;
      fprintf(f, "%s# %s %s\n", blocks ? "\n\n" : "", m[i].preset, p ? "int8" : "fp32");
      for (int d = 0; d < m[i].n_depths; d++) {
        fprintf(f, "%d", m[i].depths[d]);
        dat_num(f, m[i].depth_tps[p][d]);
        widen(m[i].depth_tps[p][d], &ylo, &yhi);
        fprintf(f, "\n");
        if (m[i].depths[d] > max_depth) max_depth = m[i].depths[d];
      }
      char t[48];
      gp_title(t, sizeof t, m[i].preset);
      colour[blocks] = i + 1;
      prec_of[blocks] = p;
      snprintf(titles[blocks++], sizeof titles[0], "%s %s", t, p ? "int8" : "fp32");
    }
  if (!plot_close(f, dir, "depth.dat")) return false;
  if (!(f = plot_open(dir, "depth.gp"))) return false;
  cli_plot_script_head(f, "depth", "decode tokens/s vs context depth", caption);
  fprintf(f,
          "set xlabel \"context depth (position of the first timed decode step, tokens)\"\n"
          "set xrange [-%d:%d]\n",
          max_depth / 20 + 1, max_depth + max_depth / 20 + 1);
  y_axis(f, "decode tokens/s", ylo, yhi);
  fprintf(f, "plot ");
  for (int b = 0; b < blocks; b++)
    fprintf(f, "%s\"depth.dat\" index %d using 1:2 with linespoints lw 2 lc %d dt %d pt %d "
               "title \"%s\"",
            b ? ", \\\n     " : "", b, colour[b], prec_of[b] ? 1 : 2, prec_of[b] ? 7 : 5,
            titles[b]);
  if (!blocks) fprintf(f, "NaN notitle");
  fprintf(f, "\n");
  if (!plot_close(f, dir, "depth.gp")) return false;
  return plot_render(dir, "depth.gp");
}

bool cli_plot_batches(const char *dir, const cli_plot_model_t *m, int n, const char *device,
                      const char *caption) {
  FILE *f = plot_open(dir, "batch.dat");
  if (!f) return false;
  fprintf(f, "# aggregate int8 decode tokens/s of B sequences on one engine: one block per "
             "model (gnuplot index), columns batch cpu_measured device_all_projected "
             "device_auto_projected (NaN: not run)\n");
  int blocks = 0, max_b = 1;
  bool any_all = false, any_auto = false;
  double ylo = 0, yhi = 0;
  char names[16][48];
  for (int i = 0; i < n && blocks < 16; i++) {
    if (!m[i].n_batches) continue;
    fprintf(f, "%s# %s\n", blocks ? "\n\n" : "", m[i].preset);
    for (int b = 0; b < m[i].n_batches; b++) {
      fprintf(f, "%d", m[i].batches[b]);
      dat_num(f, m[i].batch_cpu_tps[b]);
      dat_num(f, m[i].batch_all_tps ? m[i].batch_all_tps[b] : 0);
      dat_num(f, m[i].batch_auto_tps ? m[i].batch_auto_tps[b] : 0);
      widen(m[i].batch_cpu_tps[b], &ylo, &yhi);
      if (m[i].batch_all_tps) widen(m[i].batch_all_tps[b], &ylo, &yhi);
      if (m[i].batch_auto_tps) widen(m[i].batch_auto_tps[b], &ylo, &yhi);
      fprintf(f, "\n");
      if (m[i].batches[b] > max_b) max_b = m[i].batches[b];
    }
    any_all |= m[i].batch_all_tps != NULL;
    any_auto |= m[i].batch_auto_tps != NULL;
    gp_title(names[blocks++], sizeof names[0], m[i].preset);
  }
  if (!plot_close(f, dir, "batch.dat")) return false;
  if (!(f = plot_open(dir, "batch.gp"))) return false;
  cli_plot_script_head(f, "batch", "int8 decode tokens/s vs batch size (all sequences together)",
              caption);
  fprintf(f,
          "set xlabel \"batch size B (sequences decoded together, log scale)\"\n"
          "set logscale x 2\n"
          "set xrange [0.7:%d]\n",
          (int)(max_b * 1.4) + 1);
  y_axis(f, "aggregate decode tokens/s", ylo, yhi);
  char dev[128];
  gp_title(dev, sizeof dev, device ? device : "device");
  fprintf(f, "plot ");
  for (int b = 0; b < blocks; b++) {
    /* one colour per model; solid = measured, dashed/dotted = projected */
    fprintf(f, "%s\"batch.dat\" index %d using 1:2 with linespoints lw 2 lc %d pt 7 title "
               "\"%s CPU (measured)\"",
            b ? ", \\\n     " : "", b, b + 1, names[b]);
    if (any_all)
      fprintf(f, ", \\\n     \"batch.dat\" index %d using 1:3 with linespoints lw 2 lc %d dt 2 "
                 "pt 4 title \"%s on %s, all matmuls (projected)\"",
              b, b + 1, names[b], dev);
    if (any_auto)
      fprintf(f, ", \\\n     \"batch.dat\" index %d using 1:4 with linespoints lw 2 lc %d dt 3 "
                 "pt 6 title \"%s on %s, auto (projected)\"",
              b, b + 1, names[b], dev);
  }
  if (!blocks) fprintf(f, "NaN notitle");
  fprintf(f, "\n");
  if (!plot_close(f, dir, "batch.gp")) return false;
  return plot_render(dir, "batch.gp");
}

bool cli_plot_roofline(const char *dir, const tsr_bench_kernel_results_t *kr,
                       const char *caption) {
  FILE *f = plot_open(dir, "roofline.dat");
  if (!f) return false;
  fprintf(f, "# the limits measured in this run: mem_read_gbps %.6g int8_peak_gops %.6g "
             "fp32_peak_gflops %.6g\n"
             "# kernel ops_per_byte (2*M*N*K / bytes read: weights + activations) gops kind\n",
          kr->mem_bw_gbps, kr->int8_peak_gops, kr->fp32_peak_gflops);
  double lo = 1e30, hi = 0;
  for (int i = 0; i < kr->n_shapes; i++) {
    const tsr_bench_kernel_result_t *k = &kr->shapes[i];
    const double ops = 2.0 * k->shape.m * (double)k->shape.n * k->shape.k;
    const double bytes = (double)k->shape.n * k->shape.k + (double)k->shape.m * k->shape.k;
    const double ai = ops / bytes;
    fprintf(f, "int8:%dx%dx%d %.6g %.6g int8\n", k->shape.m, k->shape.n, k->shape.k, ai,
            k->gops);
    if (ai < lo) lo = ai;
    if (ai > hi) hi = ai;
  }
  if (kr->sgemm_n && kr->sgemm_gflops > 0) {
    /* three n x n fp32 matrices: 12 n^2 bytes for 2 n^3 flops */
    const double ai = (double)kr->sgemm_n / 6.0;
    fprintf(f, "sgemm:%d^3 %.6g %.6g fp32\n", kr->sgemm_n, ai, kr->sgemm_gflops);
    if (ai < lo) lo = ai;
    if (ai > hi) hi = ai;
  }
  if (hi == 0) lo = 0.5, hi = 1000;
  /* Point labels, alternately below and above (shapes of like intensity
   * sit close together). */
  char labels[2048];
  size_t ll = 0;
  labels[0] = '\0';
  for (int i = 0; i <= kr->n_shapes && ll < sizeof labels - 200; i++) {
    char name[64];
    double ai, y;
    if (i < kr->n_shapes) {
      const tsr_bench_kernel_result_t *k = &kr->shapes[i];
      snprintf(name, sizeof name, "int8 %dx%dx%d", k->shape.m, k->shape.n, k->shape.k);
      ai = 2.0 * k->shape.m * (double)k->shape.n * k->shape.k /
           ((double)k->shape.n * k->shape.k + (double)k->shape.m * k->shape.k);
      y = k->gops;
    } else {
      if (!kr->sgemm_n || !(kr->sgemm_gflops > 0)) break;
      snprintf(name, sizeof name, "sgemm %d^3", kr->sgemm_n);
      ai = kr->sgemm_n / 6.0, y = kr->sgemm_gflops;
    }
    if (!(y > 0)) continue;
    ll += (size_t)snprintf(labels + ll, sizeof labels - ll,
                           "set label %d \"%s\" at %.6g,%.6g center offset 0,%s font \",9\" "
                           "noenhanced\n", i + 1, name, ai, y, i % 2 ? "1.3" : "-1.3");
  }
  if (!plot_close(f, dir, "roofline.dat")) return false;
  if (!(f = plot_open(dir, "roofline.gp"))) return false;
  cli_plot_script_head(f, "roofline", "roofline of the kernels against this machine's measured limits",
              caption);
  fprintf(f,
          "bw = %.6g    # GB/s, memory read bandwidth measured in this run\n"
          "p8 = %.6g    # GOPS, int8 peak measured in this run\n"
          "p32 = %.6g   # GFLOPS, fp32 FMA peak measured in this run\n"
          "roof(x, p) = (bw * x < p) ? bw * x : p\n"
          "set xlabel \"arithmetic intensity (operations per byte read, log scale)\"\n"
          "set ylabel \"GOPS (int8) / GFLOPS (fp32), log scale\"\n"
          "set logscale xy\n"
          "set xrange [%.6g:%.6g]\n"
          "set samples 500\n"
          "%s"
          "plot (p8 > 0 ? roof(x, p8) : NaN) with lines lw 2 lc rgb \"#1f77b4\" "
          "title sprintf(\"int8 roof: min(%%.1f GB/s x AI, %%.0f GOPS)\", bw, p8), \\\n"
          "     (p32 > 0 ? roof(x, p32) : NaN) with lines lw 2 dt 2 lc rgb \"#d62728\" "
          "title sprintf(\"fp32 roof: min(%%.1f GB/s x AI, %%.0f GFLOPS)\", bw, p32), \\\n"
          "     \"roofline.dat\" using 2:(strcol(4) eq \"int8\" ? $3 : NaN) with points pt 7 "
          "ps 1.8 lc rgb \"#1f77b4\" title \"int8 kernels (tsr_qgemm)\" noenhanced, \\\n"
          "     \"\" using 2:(strcol(4) eq \"fp32\" ? $3 : NaN) with points pt 5 ps 1.8 "
          "lc rgb \"#d62728\" title \"OpenBLAS sgemm (fp32)\""
          "\n",
          kr->mem_bw_gbps, kr->int8_peak_gops, kr->fp32_peak_gflops, lo / 4, hi * 4, labels);
  if (!plot_close(f, dir, "roofline.gp")) return false;
  return plot_render(dir, "roofline.gp");
}
