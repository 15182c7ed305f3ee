/* Round16: y = float(half(x)), IEEE round to nearest even, in one pass. An ONNX Runtime custom-op library
 * (domain "paritygate"), compiled on first use by paritygate.backend.onnx.strict.round16 with the system's C compiler.
 *
 * A strict FP16 artifact rounds a tensor with a Cast pair (float -> float16 -> float): two kernels, the first on one
 * thread, 12 bytes moved an element. This is the same rounding in one kernel on ONNX Runtime's intra-op threads,
 * 8 bytes an element. Its values are the Cast pair's, bit for bit (tests/backend/onnx/strict/test_round16.py).
 *
 * ONNX Runtime's C API is a table of function pointers (OrtApi) that only grows: an entry keeps its position in
 * every later release, so a library that asks for version 17 of the table runs on any runtime since 1.17. Rather
 * than carry ONNX Runtime's header, this file declares the few entries it calls, by position, and the OrtCustomOp
 * struct it hands over (its fields in their order; version 18, so ONNX Runtime reads none added after 18). Version
 * 18 lets ONNX Runtime write the output into the input's buffer when nothing else reads the input (measured: 2%
 * of mobilenet's strict run); each element is read before it is written.
 * paritygate.backend.onnx.strict.round16 checks the compiled library on a probe before any model uses it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

typedef struct OrtStatus OrtStatus;
typedef void *const *Api; /* an OrtApi: its entries, in order */
typedef struct {
  Api (*GetApi)(uint32_t version);
  const char *(*GetVersionString)(void);
} ApiBase;

enum { API_VERSION = 17, OP_VERSION = 18, ONNX_FLOAT = 1, CHUNK = 8192 /* floats a thread rounds at a time */ };
enum { /* positions in OrtApi */
  CREATE_STATUS = 0, CREATE_DOMAIN = 26, DOMAIN_ADD = 27, ADD_DOMAIN = 28, TENSOR_DATA = 51, RANK = 61, DIMS = 62,
  ELEMENTS = 64, TYPE_AND_SHAPE = 65, GET_INPUT = 90, GET_OUTPUT = 91, RELEASE_TYPE_AND_SHAPE = 99,
  PARALLEL_FOR = 274
};
#define CALL(slot, type, ...) ((type)api[slot])(__VA_ARGS__)
#define TRY(call) do { OrtStatus *status_ = (call); if (status_) return status_; } while (0)

typedef struct {
  uint32_t version;
  void *(*CreateKernel)(const void *op, Api api, const void *info);
  const char *(*GetName)(const void *op);
  const char *(*GetExecutionProviderType)(const void *op);
  int (*GetInputType)(const void *op, size_t index);
  size_t (*GetInputTypeCount)(const void *op);
  int (*GetOutputType)(const void *op, size_t index);
  size_t (*GetOutputTypeCount)(const void *op);
  void (*KernelCompute)(void *kernel, void *context);
  void (*KernelDestroy)(void *kernel);
  int (*GetInputCharacteristic)(const void *op, size_t index);
  int (*GetOutputCharacteristic)(const void *op, size_t index);
  int (*GetInputMemoryType)(const void *op, size_t index);
  int (*GetVariadicInputMinArity)(const void *op);
  int (*GetVariadicInputHomogeneity)(const void *op);
  int (*GetVariadicOutputMinArity)(const void *op);
  int (*GetVariadicOutputHomogeneity)(const void *op);
  OrtStatus *(*CreateKernelV2)(const void *op, Api api, const void *info, void **kernel);
  OrtStatus *(*KernelComputeV2)(void *kernel, void *context);
  void *InferOutputShapeFn, *GetStartVersion, *GetEndVersion; /* version 17: none given */
  size_t (*GetMayInplace)(int **input_index, int **output_index);
  void (*ReleaseMayInplace)(int *input_index, int *output_index);
  size_t (*GetAliasMap)(int **input_index, int **output_index);
  void (*ReleaseAliasMap)(int *input_index, int *output_index);
} CustomOp;

static Api api;

static void round_span(const float *x, float *y, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  const int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), nearest)));
  for (; i < n; ++i) y[i] = _cvtsh_ss(_cvtss_sh(x[i], nearest));
#else
  for (; i < n; ++i) y[i] = (float)(_Float16)x[i]; /* without F16C: the compiler's conversion (GCC 12+, Clang 15+) */
#endif
}

typedef struct { const float *x; float *y; size_t n; } Job;

static void round_chunk(void *data, size_t k) {
  const Job *job = data;
  size_t start = k * CHUNK, n = job->n - start < CHUNK ? job->n - start : CHUNK;
  round_span(job->x + start, job->y + start, n);
}

static OrtStatus *compute(void *kernel, void *context) {
  (void)kernel;
  const void *input;
  void *output, *info, *x, *y;
  size_t rank, n;
  TRY(CALL(GET_INPUT, OrtStatus *(*)(const void *, size_t, const void **), context, 0, &input));
  TRY(CALL(TYPE_AND_SHAPE, OrtStatus *(*)(const void *, void **), input, &info));
  OrtStatus *status = CALL(RANK, OrtStatus *(*)(const void *, size_t *), info, &rank);
  int64_t dims[rank ? rank : 1];
  if (!status) status = CALL(DIMS, OrtStatus *(*)(const void *, int64_t *, size_t), info, dims, rank);
  if (!status) status = CALL(ELEMENTS, OrtStatus *(*)(const void *, size_t *), info, &n);
  CALL(RELEASE_TYPE_AND_SHAPE, void (*)(void *), info);
  if (status) return status;
  TRY(CALL(GET_OUTPUT, OrtStatus *(*)(void *, size_t, const int64_t *, size_t, void **), context, 0, dims, rank,
           &output));
  TRY(CALL(TENSOR_DATA, OrtStatus *(*)(const void *, void **), input, &x));
  TRY(CALL(TENSOR_DATA, OrtStatus *(*)(const void *, void **), output, &y));
  Job job = {x, y, n};
  if (n <= CHUNK) {
    round_span(job.x, job.y, n);
    return NULL;
  }
  return CALL(PARALLEL_FOR, OrtStatus *(*)(const void *, void (*)(void *, size_t), size_t, size_t, void *), context,
              round_chunk, (n + CHUNK - 1) / CHUNK, 0, &job);
}

static void *create(const void *op, Api api_, const void *info) { (void)api_, (void)info; return (void *)op; }
static void destroy(void *kernel) { (void)kernel; }
static const char *name(const void *op) { (void)op; return "Round16"; }
static const char *provider(const void *op) { (void)op; return "CPUExecutionProvider"; }
static int float_type(const void *op, size_t index) { (void)op, (void)index; return ONNX_FLOAT; }
static size_t one(const void *op) { (void)op; return 1; }
static int required(const void *op, size_t index) { (void)op, (void)index; return 0; /* also: default memory */ }
static int single(const void *op) { (void)op; return 1; }

static size_t in_place(int **input_index, int **output_index) { /* output 0 may take input 0's buffer */
  *input_index = calloc(1, sizeof(int));
  *output_index = calloc(1, sizeof(int));
  if (*input_index && *output_index) return 1;
  free(*input_index), free(*output_index);
  *input_index = *output_index = NULL;
  return 0;
}
static void release(int *input_index, int *output_index) { free(input_index), free(output_index); }
static size_t no_alias(int **input_index, int **output_index) { *input_index = *output_index = NULL; return 0; }

static const CustomOp round16 = {
    OP_VERSION, create, name, provider, float_type, one, float_type, one, NULL, destroy, required, required,
    required, single, single, single, single, NULL, compute, NULL, NULL, NULL, in_place, release, no_alias, release};

OrtStatus *RegisterCustomOps(void *options, const ApiBase *base) {
  void *domain;
  api = base->GetApi(API_VERSION);
  if (!api) {
    Api first = base->GetApi(1);
    return ((OrtStatus * (*)(int, const char *)) first[CREATE_STATUS])(1, "Round16 needs ONNX Runtime 1.17 or later");
  }
  TRY(CALL(CREATE_DOMAIN, OrtStatus *(*)(const char *, void **), "paritygate", &domain));
  TRY(CALL(DOMAIN_ADD, OrtStatus *(*)(void *, const void *), domain, &round16));
  return CALL(ADD_DOMAIN, OrtStatus *(*)(void *, void *), options, domain);
}
