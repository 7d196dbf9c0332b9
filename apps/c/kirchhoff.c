/*
 * kirchhoff: a Kirchhoff pre-stack depth migration kernel in C, on
 * taskfold's C API. It builds psdm's synthetic survey (the same seeded
 * v(z) model with dipping reflectors, the same shots, receivers and
 * traces: see the book's psdm section) and migrates each rank's traces in
 * batches, as psdm does. Every batch image is reduced to the root with a
 * non-blocking reduction of a buffer from tf_buf_alloc (sent without a
 * copy) while the rank migrates the next batch; between traces the rank
 * completes, in order, the reductions that are done. The root sums the
 * batch images and prints psdm's checksum, which agrees with psdm's on
 * the same options within psdm's tolerance (1e-5 relative).
 *
 *   taskfold run -n 4 -- ./kirchhoff [--nx 600 --nz 300 ...] [--raw img.f32]
 *
 * The options and their defaults are psdm's: --nx --nz --dx --shots
 * --receivers --reflectors --seed --dt-ms --freq --batch --in-flight
 * --root, and --raw PATH writes the image as psdm's raw format.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "taskfold.h"

#define APERTURE_FULL 50.0
#define APERTURE_MAX 65.0
#define PI 3.14159265358979323846

static void check(int rc, const char *what) {
  if (rc != TF_SUCCESS) {
    fprintf(stderr, "kirchhoff: %s: %s: %s\n", what, tf_strerror(rc),
            tf_last_error());
    exit(1);
  }
}

/* ---- psdm's model (apps/psdm/src/model.rs) ---- */

static uint64_t rng_state;

static uint64_t next_u64(void) {
  rng_state += 0x9e3779b97f4a7c15ull;
  uint64_t z = rng_state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(next_u64() >> 11) / (double)(1ull << 53);
}

typedef struct {
  double z_mid, slope, amplitude;
} reflector;

typedef struct {
  size_t nx, nz;
  double dx, v0, gradient;
  size_t nrefl;
  reflector *refl;
} model;

static double depth_of(const model *m) { return (double)(m->nz - 1) * m->dx; }
static double width_of(const model *m) { return (double)(m->nx - 1) * m->dx; }

static double clamp(double v, double lo, double hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

static model generate(size_t nx, size_t nz, double dx, size_t nrefl,
                      uint64_t seed) {
  model m = {nx, nz, dx, 0, 0, nrefl, calloc(nrefl ? nrefl : 1, sizeof(reflector))};
  rng_state = seed;
  m.v0 = uniform(1500.0, 1800.0);
  m.gradient = uniform(0.3, 0.7);
  double depth = depth_of(&m);
  double n = (double)(nrefl ? nrefl : 1);
  for (size_t i = 0; i < nrefl; i++) {
    double slot = 0.6 * depth / n;
    double z_mid = 0.25 * depth + slot * ((double)i + uniform(0.3, 0.7));
    double dip = uniform(-12.0, 12.0) * (PI / 180.0);
    double room = fmin(z_mid - 0.1 * depth, 0.95 * depth - z_mid);
    double half_width = 0.5 * (double)(nx - 1) * dx;
    double max_slope = half_width > 0.0 ? room / half_width : 0.0;
    double sign = (next_u64() & 1) == 0 ? 1.0 : -1.0;
    m.refl[i].z_mid = z_mid;
    m.refl[i].slope = clamp(tan(dip), -max_slope, max_slope);
    m.refl[i].amplitude = sign * uniform(0.6, 1.0);
  }
  return m;
}

static double mean_slowness(const model *m, double z) {
  double kz = m->gradient * z;
  if (fabs(kz) < 1e-9 * m->v0) return 1.0 / m->v0;
  return log(1.0 + kz / m->v0) / kz;
}

static double traveltime(const model *m, double h, double z) {
  return sqrt(h * h + z * z) * mean_slowness(m, z);
}

static double reflector_depth(const model *m, const reflector *r, double x) {
  double x_mid = 0.5 * (double)(m->nx - 1) * m->dx;
  return r->z_mid + r->slope * (x - x_mid);
}

/* ---- psdm's survey (apps/psdm/src/survey.rs) ---- */

static double aperture_weight(double h, double z) {
  double angle = atan2(fabs(h), fmax(z, 0.0)) * (180.0 / PI);
  if (angle <= APERTURE_FULL) return 1.0;
  if (angle >= APERTURE_MAX) return 0.0;
  double u = (angle - APERTURE_FULL) / (APERTURE_MAX - APERTURE_FULL);
  return clamp(0.5 * (1.0 + cos(PI * u)), 0.0, 1.0);
}

static double ricker(double t, double f0) {
  double a = (PI * f0 * t) * (PI * f0 * t);
  return (1.0 - 2.0 * a) * exp(-a);
}

typedef struct {
  size_t nshots, nrec, nt;
  size_t *shots, *rec;
  double dt, f0;
} survey;

static size_t *spread(size_t n, size_t nx) {
  size_t *s = calloc(n ? n : 1, sizeof(size_t));
  double last = (double)(nx - 1);
  if (n == 1) s[0] = nx / 2;
  for (size_t i = 0; n > 1 && i < n; i++)
    s[i] = (size_t)round((double)i * last / (double)(n - 1));
  return s;
}

static survey survey_new(const model *m, size_t shots, size_t receivers,
                         double dt, double f0) {
  double tan_max = tan(APERTURE_MAX * (PI / 180.0));
  double z = depth_of(m);
  double h = fmin(z * tan_max, width_of(m));
  double tmax = 2.0 * traveltime(m, h, z) + 1.5 / f0;
  survey s = {shots, receivers, (size_t)ceil(tmax / dt) + 2,
              spread(shots, m->nx), spread(receivers, m->nx), dt, f0};
  return s;
}

/* Models trace g (Kirchhoff modelling of every reflector's scatterers). */
static void model_trace(const survey *s, const model *m, size_t g,
                        double *acc, float *trace) {
  size_t is = s->shots[g / s->nrec], ir = s->rec[g % s->nrec];
  double xs = (double)is * m->dx, xr = (double)ir * m->dx;
  memset(acc, 0, s->nt * sizeof(double));
  long half = (long)ceil(1.5 / s->f0 / s->dt);
  for (size_t r = 0; r < m->nrefl; r++) {
    for (size_t ix = 0; ix < m->nx; ix++) {
      double x = (double)ix * m->dx;
      double z = reflector_depth(m, &m->refl[r], x);
      if (z <= 0.0) continue;
      double w = aperture_weight(x - xs, z) * aperture_weight(x - xr, z);
      if (w == 0.0) continue;
      double t = traveltime(m, x - xs, z) + traveltime(m, x - xr, z);
      long centre = (long)round(t / s->dt);
      double amp = w * m->refl[r].amplitude;
      long lo = centre - half < 0 ? 0 : centre - half;
      long hi = centre + half + 1 < (long)s->nt ? centre + half + 1 : (long)s->nt;
      for (long k = lo; k < hi; k++)
        acc[k] += amp * ricker((double)k * s->dt - t, s->f0);
    }
  }
  for (size_t k = 0; k < s->nt; k++) trace[k] = (float)acc[k];
}

/* ---- psdm's migration kernel (apps/psdm/src/migrate.rs) ---- */

typedef struct {
  size_t nx, nz;
  float *samples, *weight;
  size_t *reach;
} tables;

static tables tables_new(const model *m, const survey *s) {
  size_t nx = m->nx, nz = m->nz;
  tables t = {nx, nz, calloc(nx * nz, sizeof(float)),
              calloc(nx * nz, sizeof(float)), calloc(nz, sizeof(size_t))};
  for (size_t iz = 0; iz < nz; iz++) {
    double z = (double)iz * m->dx;
    for (size_t d = 0; d < nx; d++) {
      double h = (double)d * m->dx;
      t.samples[iz * nx + d] = (float)(traveltime(m, h, z) / s->dt);
      double w = aperture_weight(h, z);
      t.weight[iz * nx + d] = (float)w;
      if (w > 0.0) t.reach[iz] = d;
    }
  }
  return t;
}

static void migrate_trace(const tables *t, float *image, const float *trace,
                          size_t nt, size_t is, size_t ir) {
  size_t nx = t->nx;
  if (nt < 2) return;
  float last = (float)(nt - 1);
  for (size_t iz = 0; iz < t->nz; iz++) {
    size_t reach = t->reach[iz];
    size_t far = is > ir ? is : ir, near = is < ir ? is : ir;
    size_t lo = far > reach ? far - reach : 0;
    size_t hi = near + reach < nx - 1 ? near + reach : nx - 1;
    if (lo > hi) continue;
    const float *tt_row = t->samples + iz * nx, *w = t->weight + iz * nx;
    float *row = image + iz * nx;
    for (size_t ix = lo; ix <= hi; ix++) {
      size_t ds = ix > is ? ix - is : is - ix, dr = ix > ir ? ix - ir : ir - ix;
      float tt = tt_row[ds] + tt_row[dr];
      if (tt >= last) continue;
      size_t i = (size_t)tt;
      float f = tt - (float)i;
      float v = trace[i] + f * (trace[i + 1] - trace[i]);
      row[ix] += w[ds] * w[dr] * v;
    }
  }
}

/* psdm's checksum: position-weighted, stable under reassociation. */
static double checksum(const float *img, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++)
    sum += (double)img[i] *
           (1.0 + (double)(((uint64_t)i * 2654435761ull) % 1000) / 1000.0);
  return sum;
}

static void write_raw(const char *path, const float *img, size_t nx, size_t nz) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    exit(1);
  }
  uint32_t dims[2] = {(uint32_t)nx, (uint32_t)nz};
  fwrite("PSDMF32\0", 1, 8, f);
  fwrite(dims, sizeof dims, 1, f); /* little-endian on every target */
  fwrite(img, sizeof(float), nx * nz, f);
  fclose(f);
}

typedef struct {
  size_t nx, nz, shots, receivers, reflectors, batch, in_flight;
  uint64_t seed;
  double dx, dt_ms, freq;
  int root;
  const char *raw;
} options;

static options parse(int argc, char **argv) {
  options o = {600, 300, 48, 192, 3, 96, 4, 7, 10.0, 2.0, 20.0, 0, NULL};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--nx")) o.nx = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--nz")) o.nz = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--shots")) o.shots = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--receivers")) o.receivers = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--reflectors")) o.reflectors = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--batch")) o.batch = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--in-flight")) o.in_flight = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--seed")) o.seed = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--dx")) o.dx = strtod(v, NULL);
    else if (!strcmp(k, "--dt-ms")) o.dt_ms = strtod(v, NULL);
    else if (!strcmp(k, "--freq")) o.freq = strtod(v, NULL);
    else if (!strcmp(k, "--root")) o.root = atoi(v);
    else if (!strcmp(k, "--raw")) o.raw = v;
    else {
      fprintf(stderr, "kirchhoff: unknown option %s\n", k);
      exit(2);
    }
  }
  if (o.nx < 2 || o.nz < 2 || !o.shots || !o.receivers || !o.batch ||
      !o.in_flight || !(o.dx > 0) || !(o.dt_ms > 0) || !(o.freq > 0)) {
    fprintf(stderr, "kirchhoff: sizes must be positive (the image at least 2 x 2)\n");
    exit(2);
  }
  return o;
}

/* One batch's reduction in flight: its buffer and request. */
typedef struct {
  tf_buf buf;
  tf_request req;
} slot;

int main(int argc, char **argv) {
  options o = parse(argc, argv);
  check(tf_init(), "tf_init");
  int32_t rank, size;
  check(tf_rank(&rank), "tf_rank");
  check(tf_size(&size), "tf_size");
  if (o.root < 0 || o.root >= size) {
    fprintf(stderr, "kirchhoff: --root %d: the job has %d ranks\n", o.root, size);
    return 2;
  }
  model m = generate(o.nx, o.nz, o.dx, o.reflectors, o.seed);
  survey s = survey_new(&m, o.shots, o.receivers, o.dt_ms * 1e-3, o.freq);
  tables t = tables_new(&m, &s);
  size_t n = s.nshots * s.nrec, pixels = o.nx * o.nz;
  size_t first = n * (size_t)rank / (size_t)size;
  size_t end = n * (size_t)(rank + 1) / (size_t)size;
  size_t most = (n + (size_t)size - 1) / (size_t)size;
  size_t batches = (most + o.batch - 1) / o.batch;
  if (batches == 0) batches = 1;

  double *acc = malloc(s.nt * sizeof(double));
  float *trace = malloc(s.nt * sizeof(float));
  float *image = calloc(pixels, sizeof(float)); /* the root's sum */
  size_t nslots = o.in_flight + 1, settled = 0;
  slot *slots = calloc(nslots, sizeof(slot));
  for (size_t k = 0; k < nslots; k++)
    check(tf_buf_alloc(pixels, TF_F32, &slots[k].buf, NULL), "tf_buf_alloc");

  /* Completes batch `settled` (blocking if `block`); false if not done. */
#define SETTLE(block)                                                        \
  do {                                                                       \
    slot *sl = &slots[settled % nslots];                                     \
    int done = 1;                                                            \
    tf_status st;                                                            \
    if (block) check(tf_wait(&sl->req, &st), "tf_wait");                     \
    else check(tf_test(&sl->req, &done, &st), "tf_test");                    \
    if (!done) break;                                                        \
    if (st.is_result) {                                                      \
      float *part;                                                           \
      check(tf_buf_data(sl->buf, (void **)&part, NULL), "tf_buf_data");      \
      for (size_t p = 0; p < pixels; p++) image[p] += part[p];               \
    }                                                                        \
    settled++;                                                               \
  } while (0)

  for (size_t b = 0; b < batches; b++) {
    /* A free slot: the oldest reduction must be complete. */
    while (b - settled >= nslots) SETTLE(1);
    slot *sl = &slots[b % nslots];
    float *part;
    size_t count;
    check(tf_buf_data(sl->buf, (void **)&part, &count), "tf_buf_data");
    memset(part, 0, count * sizeof(float));
    size_t lo = first + b * o.batch < end ? first + b * o.batch : end;
    size_t hi = lo + o.batch < end ? lo + o.batch : end;
    for (size_t g = lo; g < hi; g++) {
      model_trace(&s, &m, g, acc, trace);
      migrate_trace(&t, part, trace, s.nt, s.shots[g / s.nrec], s.rec[g % s.nrec]);
      /* Settle, in order, what completed meanwhile (never blocks). */
      size_t before = settled + 1;
      while (settled < b && before != settled) {
        before = settled;
        SETTLE(0);
      }
    }
    char id[48];
    snprintf(id, sizeof id, "kirchhoff-batch-%zu", b);
    tf_options opts = {0};
    opts.id = id;
    check(tf_ireduce_buf(sl->buf, TF_SUM, o.root, &opts, &sl->req), "tf_ireduce_buf");
  }
  while (settled < batches) SETTLE(1);
  for (size_t k = 0; k < nslots; k++) check(tf_buf_free(&slots[k].buf), "tf_buf_free");

  if (rank == o.root) {
    printf("kirchhoff: %zu traces in %zu batches over %d ranks, image %zu x %zu\n",
           n, batches, size, o.nx, o.nz);
    printf("kirchhoff: checksum %.9e\n", checksum(image, pixels));
    if (o.raw) write_raw(o.raw, image, o.nx, o.nz);
  }
  check(tf_finalize(), "tf_finalize");
  printf("rank %d: kirchhoff done\n", rank);
  return 0;
}
