// Kernel-level bench of the row-tiled Q4_0 x Q8_1 kernels of mmvq.cu, without a ggml build.
//
// Compiled as one translation unit with a patched ggml/src/ggml-cuda/mmvq.cu and quantize.cu (see
// rt_bench.sh), so it launches the kernels exactly as the patch does, next to upstream's
// mul_mat_vec_q. Used to choose between kernel shapes before the full build.
//
//   rt_bench check                    bit-identity of every variant against mul_mat_vec_q: 4 input modes,
//                                     shapes with row counts = 0..3 mod 4, row lengths on and off the
//                                     shared-memory path; exit 1 on any difference
//   rt_bench perf MxK[,MxK...] NS REPS ROUNDS [VARIANTS]
//                                     per MUL_MAT node (q8_1 quantization + mat-vec, as ggml runs it, in a
//                                     CUDA graph over rotating weights of at least 512 MiB), median us per
//                                     variant, variants interleaved in every round
//   rt_bench once MxK N VARIANT       one launch of each kernel (for a profiler)

#include "mmvq.cu"
#include "quantize.cu"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// ---- what the two files need from the rest of ggml (never reached on the paths used here, except info) ----
static ggml_cuda_device_info g_info;
const ggml_cuda_device_info & ggml_cuda_info() { return g_info; }
int ggml_cuda_get_device() { return 0; }
void ggml_cuda_error(const char * stmt, const char * func, const char * file, int line, const char * msg) {
    std::fprintf(stderr, "CUDA error %s in %s (%s:%d): %s\n", msg, func, file, line, stmt);
    std::exit(3);
}
extern "C" void ggml_abort(const char * file, int line, const char * fmt, ...) {
    std::fprintf(stderr, "abort at %s:%d (%s)\n", file, line, fmt);
    std::exit(3);
}
extern "C" int64_t ggml_blck_size(enum ggml_type type) { return type == GGML_TYPE_Q4_0 ? 32 : 1; }
[[noreturn]] static void not_used(const char * what) {
    std::fprintf(stderr, "%s is not available in this bench\n", what);
    std::exit(3);
}
extern "C" bool ggml_is_quantized(enum ggml_type) { not_used("ggml_is_quantized"); }
extern "C" size_t ggml_type_size(enum ggml_type) { not_used("ggml_type_size"); }
extern "C" bool ggml_are_same_stride(const struct ggml_tensor *, const struct ggml_tensor *) { not_used("ggml_are_same_stride"); }
extern "C" bool ggml_is_contiguous(const struct ggml_tensor *) { not_used("ggml_is_contiguous"); }
extern "C" int64_t ggml_nelements(const struct ggml_tensor *) { not_used("ggml_nelements"); }
extern "C" size_t ggml_nbytes(const struct ggml_tensor *) { not_used("ggml_nbytes"); }
extern "C" bool ggml_is_contiguously_allocated(const struct ggml_tensor *) { not_used("ggml_is_contiguously_allocated"); }
extern "C" enum ggml_backend_buffer_usage ggml_backend_buffer_get_usage(ggml_backend_buffer_t) { not_used("ggml_backend_buffer_get_usage"); }
extern "C" size_t ggml_backend_buffer_get_alloc_size(ggml_backend_buffer_t, const struct ggml_tensor *) { not_used("ggml_backend_buffer_get_alloc_size"); }
void ggml_cuda_set_device(int) { not_used("ggml_cuda_set_device"); }
std::unique_ptr<ggml_cuda_pool> ggml_backend_cuda_context::new_pool_for_device(int, int) { not_used("new_pool_for_device"); }

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); std::exit(3); } } while (0)

namespace {

using launch_fn = std::function<void(const mmvq_q4_0_rt_args &, int)>;

struct variant {
    const char * name;
    launch_fn    fn;
};

template <template <int> class L>
launch_fn by_ncols() {
    return [](const mmvq_q4_0_rt_args & a, int n) {
        switch (n) {
            case 5: L<5>::go(a); break;
            case 6: L<6>::go(a); break;
            case 7: L<7>::go(a); break;
            case 8: L<8>::go(a); break;
            default: std::exit(4);
        }
    };
}

#define REGS(NAME, R, G, P, E) \
    template <int n> struct NAME { static void go(const mmvq_q4_0_rt_args & a) { mul_mat_vec_q4_0_q8_1_rt_launch_regs<n, R, G, P, E>(a); } };
#define SMEM(NAME, R, G, S, E, L1) \
    template <int n> struct NAME { static void go(const mmvq_q4_0_rt_args & a) { \
        if (!mul_mat_vec_q4_0_q8_1_rt_smem_ok(a)) { mul_mat_vec_q4_0_q8_1_rt_launch_regs<n, MMVQ_Q4_0_RT_REGS_CONFIG>(a); return; } \
        mul_mat_vec_q4_0_q8_1_rt_launch_smem<n, R, G, S, E, L1>(a); } };

REGS(regs_4_2_1_0, 4, 2, 1, 0)
REGS(regs_4_2_1_2, 4, 2, 1, 2)
REGS(regs_4_2_1_4, 4, 2, 1, 4)
SMEM(smem_4_2_3_2, 4, 2, 3, 2, false)
SMEM(smem_4_2_3_2_l1, 4, 2, 3, 2, true)
SMEM(smem_4_2_2_2, 4, 2, 2, 2, false)
SMEM(smem_4_4_2_2, 4, 4, 2, 2, false)
SMEM(smem_4_2_3_0, 4, 2, 3, 0, false)
SMEM(smem_2_4_3_2, 2, 4, 3, 2, false)
#define MMA(NAME, ROWS, W, S) \
    template <int n> struct NAME { static void go(const mmvq_q4_0_rt_args & a) { \
        if (!mul_mat_vec_q4_0_q8_1_rt_smem_ok(a)) { mul_mat_vec_q4_0_q8_1_rt_launch_regs<n, MMVQ_Q4_0_RT_REGS_CONFIG>(a); return; } \
        mul_mat_vec_q4_0_q8_1_rt_launch_mma<n, ROWS, W, S>(a); } };
MMA(mma_16_8_3, 16, 8, 3)
MMA(mma_16_8_4, 16, 8, 4)
MMA(mma_16_4_4, 16, 4, 4)
MMA(mma_8_8_3, 8, 8, 3)
MMA(mma_8_8_4, 8, 8, 4)
MMA(mma_8_4_4, 8, 4, 4)
MMA(mma_16_16_3, 16, 16, 3)

struct dispatch { static bool go(const mmvq_q4_0_rt_args & a, int n) { return mul_mat_vec_q4_0_q8_1_rt_switch(a, n, g_info.devices[0].cc); } };

void launch_base(const mmvq_q4_0_rt_args & a, int n) {
    const uint3 zero = make_uint3(0, 0, 0);
    const ggml_cuda_mm_fusion_args_device fusion{};
    const auto go = [&](auto nc) {
        constexpr int c = decltype(nc)::value;
        const std::pair<dim3, dim3> dims = calc_launch_params<GGML_TYPE_Q4_0>(c, a.nrows_x, a.nchannels_dst, a.nsamples_dst, a.warp_size, a.table_id);
        mul_mat_vec_q_switch_fusion<GGML_TYPE_Q4_0, c>(a.vx, a.vy, nullptr, fusion, a.dst, a.ncols_x, zero, a.stride_row_x,
            a.stride_col_y, a.stride_col_dst, a.channel_ratio, a.stride_channel_x, a.stride_channel_y, a.stride_channel_dst,
            a.sample_ratio, a.stride_sample_x, a.stride_sample_y, a.stride_sample_dst, dims.first, dims.second, 0, 0, a.stream);
    };
    switch (n) {
        case 5: go(std::integral_constant<int, 5>{}); break;
        case 6: go(std::integral_constant<int, 6>{}); break;
        case 7: go(std::integral_constant<int, 7>{}); break;
        case 8: go(std::integral_constant<int, 8>{}); break;
        default: std::exit(4);
    }
}

std::vector<variant> all_variants() {
    return {
        {"base", launch_base},
        {"patch", [](const mmvq_q4_0_rt_args & a, int n) { if (!dispatch::go(a, n)) launch_base(a, n); }},
        {"r4g2p1e0", by_ncols<regs_4_2_1_0>()},
        {"r4g2p1e2", by_ncols<regs_4_2_1_2>()},
        {"r4g2p1e4", by_ncols<regs_4_2_1_4>()},
        {"s4g2s3e2", by_ncols<smem_4_2_3_2>()},
        {"s4g2s3e2l1", by_ncols<smem_4_2_3_2_l1>()},
        {"s4g2s2e2", by_ncols<smem_4_2_2_2>()},
        {"s4g4s2e2", by_ncols<smem_4_4_2_2>()},
        {"s4g2s3e0", by_ncols<smem_4_2_3_0>()},
        {"s2g4s3e2", by_ncols<smem_2_4_3_2>()},
        {"m16w8s3", by_ncols<mma_16_8_3>()},
        {"m16w8s4", by_ncols<mma_16_8_4>()},
        {"m16w4s4", by_ncols<mma_16_4_4>()},
        {"m8w8s3", by_ncols<mma_8_8_3>()},
        {"m8w8s4", by_ncols<mma_8_8_4>()},
        {"m8w4s4", by_ncols<mma_8_4_4>()},
        {"m16w16s3", by_ncols<mma_16_16_3>()},
    };
}

uint64_t g_rng = 0x9E3779B97F4A7C15ull;
uint64_t rnd() { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }
double urand() { return (rnd() >> 11) * (1.0 / 9007199254740992.0); }
float nrand() { double u1 = urand() + 1e-300, u2 = urand(); return (float) (std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2)); }

// q4_0 weights [m rows x k] and f32 activations [n x k] for one input mode
void make_inputs(int mode, int64_t m, int64_t k, int n, std::vector<uint8_t> & w, std::vector<float> & x) {
    const int64_t nb = k / 32;
    w.assign((size_t) (m * nb * 18), 0);
    for (int64_t b = 0; b < m * nb; ++b) {
        uint8_t * blk = w.data() + b * 18;
        float d;
        if (mode == 1) {
            d = (float) (std::pow(10.0, -4.0 + 7.0 * urand()) * (urand() < 0.5 ? -1 : 1));
        } else {
            d = 0.02f * nrand();
        }
        const half h = __float2half(d);
        std::memcpy(blk, &h, 2);
        for (int i = 0; i < 16; ++i) {
            if (mode == 2) {
                blk[2 + i] = (uint8_t) ((urand() < 0.5 ? 0 : 15) | ((urand() < 0.5 ? 0 : 15) << 4));
            } else {
                blk[2 + i] = (uint8_t) (rnd() & 0xFF);
            }
        }
    }
    x.assign((size_t) (n * k), 0.0f);
    const int zero_col = (int) (rnd() % n);
    for (int j = 0; j < n; ++j) {
        for (int64_t i = 0; i < k; ++i) {
            x[j * k + i] = mode == 3 ? (j == zero_col ? 0.0f : (urand() < 0.5 ? -50.0f : 50.0f)) : nrand();
        }
    }
}

mmvq_q4_0_rt_args make_args(const void * w, const void * y, float * dst, int64_t m, int64_t k, cudaStream_t stream) {
    const int64_t k_padded = GGML_PAD(k, MATRIX_ROW_PADDING);
    mmvq_q4_0_rt_args a{};
    a.vx = w; a.vy = y; a.dst = dst;
    a.ncols_x = (uint32_t) k; a.nrows_x = (uint32_t) m; a.stride_row_x = (uint32_t) (k / 32);
    a.stride_col_y = (uint32_t) (k_padded / 32); a.stride_col_dst = (uint32_t) m;
    a.channel_ratio = init_fastdiv_values(1); a.sample_ratio = init_fastdiv_values(1);
    a.stride_channel_x = a.stride_channel_y = a.stride_channel_dst = 0;
    a.stride_sample_x = a.stride_sample_y = a.stride_sample_dst = 0;
    a.nchannels_dst = 1; a.nsamples_dst = 1; a.warp_size = 32; a.table_id = MMVQ_PARAMETERS_GENERIC; a.stream = stream;
    return a;
}

void quantize(const float * x, void * y, int64_t k, int n, cudaStream_t stream) {
    const int64_t k_padded = GGML_PAD(k, MATRIX_ROW_PADDING);
    quantize_row_q8_1_cuda(x, nullptr, y, GGML_TYPE_Q4_0, k, k, k * n, k * n, k_padded, n, 1, 1, stream);
}

int run_check(const std::vector<variant> & vars) {
    struct shape { int64_t m, k; };
    const std::vector<shape> shapes = {
        {4096, 4096}, {4097, 1024}, {4098, 2048}, {4099, 4096}, {4100, 1280}, {4104, 4096},
        {5120, 4160}, {4101, 4160}, {14336, 4096}, {4096, 14336}, {6143, 17408}, {17408, 5120}, {4095, 4096},
    };
    cudaStream_t stream;
    CK(cudaStreamCreate(&stream));
    int fails = 0, cases = 0;
    for (int mode = 0; mode < 4; ++mode) {
        for (const shape & s : shapes) {
            std::vector<uint8_t> w;
            std::vector<float> x;
            make_inputs(mode, s.m, s.k, 8, w, x);
            const int64_t k_padded = GGML_PAD(s.k, MATRIX_ROW_PADDING);
            void * dw; float * dx; void * dy; float * dd;
            CK(cudaMalloc(&dw, w.size()));
            CK(cudaMalloc(&dx, x.size() * 4));
            CK(cudaMalloc(&dy, 8 * k_padded / 32 * sizeof(block_q8_1)));
            CK(cudaMalloc(&dd, 8 * s.m * 4));
            CK(cudaMemcpy(dw, w.data(), w.size(), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
            for (int n = 5; n <= 8; ++n) {
                quantize(dx, dy, s.k, n, stream);
                std::vector<uint32_t> ref;
                for (const variant & v : vars) {
                    CK(cudaMemsetAsync(dd, 0xFF, 8 * s.m * 4, stream));
                    v.fn(make_args(dw, dy, dd, s.m, s.k, stream), n);
                    CK(cudaGetLastError());
                    std::vector<uint32_t> out((size_t) (n * s.m));
                    CK(cudaMemcpyAsync(out.data(), dd, out.size() * 4, cudaMemcpyDeviceToHost, stream));
                    CK(cudaStreamSynchronize(stream));
                    if (ref.empty()) {
                        ref = out;
                        for (uint32_t b : out) {
                            if (b == 0xFFFFFFFFu) { std::printf("base left an output unwritten (m %lld)\n", (long long) s.m); return 1; }
                        }
                        continue;
                    }
                    ++cases;
                    size_t ndiff = 0;
                    for (size_t i = 0; i < out.size(); ++i) ndiff += out[i] != ref[i];
                    if (ndiff) {
                        ++fails;
                        std::printf("DIFF %s mode %d %lldx%lld n %d: %zu of %zu outputs\n", v.name, mode, (long long) s.m, (long long) s.k, n, ndiff, out.size());
                    }
                }
            }
            CK(cudaFree(dw)); CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(dd));
        }
    }
    std::printf("check: %d variant cases (%zu variants x %zu shapes x 4 modes x n = 5..8), %d differ from mul_mat_vec_q\n",
                cases, vars.size() - 1, shapes.size(), fails);
    return fails ? 1 : 0;
}

__global__ void fill_q4_0(uint8_t * w, size_t nblocks, uint64_t seed) {
    for (size_t b = blockIdx.x * (size_t) blockDim.x + threadIdx.x; b < nblocks; b += (size_t) gridDim.x * blockDim.x) {
        uint64_t h = (b + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        uint8_t * blk = w + b * 18;
        for (int i = 0; i < 18; i += 2) {
            h ^= h >> 31; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 29;
            uint16_t v = (uint16_t) h;
            if (i == 0) {
                const half d = __float2half(((int) (h % 2001) - 1000) * 2e-5f + 1e-3f);
                std::memcpy(&v, &d, 2);
            }
            blk[i] = (uint8_t) v; blk[i + 1] = (uint8_t) (v >> 8);
        }
    }
}

__global__ void fill_f32(float * x, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        h ^= h >> 31; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 29;
        x[i] = (float) ((int64_t) (h % 2000001) - 1000000) * 1e-6f;
    }
}

int run_perf(const std::vector<variant> & vars, const std::string & shapes_arg, const std::vector<int> & ns, int reps, int rounds) {
    struct shape { int64_t m, k; };
    std::vector<shape> shapes;
    for (size_t p = 0; p < shapes_arg.size();) {
        size_t q = shapes_arg.find(',', p);
        if (q == std::string::npos) q = shapes_arg.size();
        const std::string t = shapes_arg.substr(p, q - p);
        shapes.push_back({std::atoll(t.c_str()), std::atoll(t.c_str() + t.find('x') + 1)});
        p = q + 1;
    }
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    // results[shape][n][variant] = per-round medians
    std::vector<std::vector<std::vector<std::vector<float>>>> res(shapes.size(),
        std::vector<std::vector<std::vector<float>>>(ns.size(), std::vector<std::vector<float>>(vars.size())));
    for (int rnd_i = 0; rnd_i < rounds; ++rnd_i) {
        for (size_t si = 0; si < shapes.size(); ++si) {
            const shape s = shapes[si];
            const size_t wbytes = (size_t) s.m * (s.k / 32) * 18;
            const int nbuf = (int) std::max<size_t>(4, ((size_t) 512 << 20) / wbytes + 1);
            const int nodes = nbuf * std::max(1, (64 + nbuf - 1) / nbuf);
            const int64_t k_padded = GGML_PAD(s.k, MATRIX_ROW_PADDING);
            uint8_t * dw; float * dx; void * dy; float * dd;
            CK(cudaMalloc(&dw, wbytes * nbuf + 256));
            CK(cudaMalloc(&dx, 8 * s.k * 4));
            CK(cudaMalloc(&dy, 8 * k_padded / 32 * sizeof(block_q8_1)));
            CK(cudaMalloc(&dd, 8 * s.m * 4));
            // buffers start at 256-byte multiples, as ggml's allocator gives them
            const size_t wstride = (wbytes + 255) / 256 * 256;
            CK(cudaFree(dw));
            CK(cudaMalloc(&dw, wstride * nbuf));
            for (int b = 0; b < nbuf; ++b) {
                fill_q4_0<<<1024, 256, 0, stream>>>(dw + b * wstride, wbytes / 18, 1234 + 77 * si + b);
            }
            fill_f32<<<256, 256, 0, stream>>>(dx, 8 * s.k, 99 + si);
            CK(cudaStreamSynchronize(stream));
            for (size_t ni = 0; ni < ns.size(); ++ni) {
                const int n = ns[ni];
                for (size_t vi = 0; vi < vars.size(); ++vi) {
                    cudaGraph_t graph;
                    cudaGraphExec_t exec;
                    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
                    for (int g = 0; g < nodes; ++g) {
                        quantize(dx, dy, s.k, n, stream);
                        vars[vi].fn(make_args(dw + (g % nbuf) * wstride, dy, dd, s.m, s.k, stream), n);
                    }
                    CK(cudaStreamEndCapture(stream, &graph));
                    CK(cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
                    for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, stream));
                    std::vector<float> t(reps);
                    for (int r = 0; r < reps; ++r) {
                        CK(cudaEventRecord(e0, stream));
                        CK(cudaGraphLaunch(exec, stream));
                        CK(cudaEventRecord(e1, stream));
                        CK(cudaEventSynchronize(e1));
                        float ms;
                        CK(cudaEventElapsedTime(&ms, e0, e1));
                        t[r] = ms * 1000.0f / nodes;
                    }
                    std::sort(t.begin(), t.end());
                    res[si][ni][vi].push_back(t[reps / 2]);
                    CK(cudaGraphExecDestroy(exec));
                    CK(cudaGraphDestroy(graph));
                }
            }
            CK(cudaFree(dw)); CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(dd));
        }
        std::fprintf(stderr, "round %d done\n", rnd_i + 1);
    }
    std::printf("| M x K | n | %s us |", vars[0].name);
    for (size_t vi = 1; vi < vars.size(); ++vi) std::printf(" %s |", vars[vi].name);
    std::printf(" spread |\n|---|---|---|");
    for (size_t vi = 1; vi < vars.size(); ++vi) std::printf("---|");
    std::printf("---|\n");
    for (size_t si = 0; si < shapes.size(); ++si) {
        for (size_t ni = 0; ni < ns.size(); ++ni) {
            auto med = [](std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
            const float b = med(res[si][ni][0]);
            float spread = 0;
            for (size_t vi = 0; vi < vars.size(); ++vi) {
                auto v = res[si][ni][vi];
                const float m = med(v);
                spread = std::max(spread, (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / m);
            }
            std::printf("| %lld x %lld | %d | %.2f |", (long long) shapes[si].m, (long long) shapes[si].k, ns[ni], b);
            for (size_t vi = 1; vi < vars.size(); ++vi) {
                const float m = med(res[si][ni][vi]);
                std::printf(" %.2f (%.3fx) |", m, b / m);
            }
            std::printf(" %.1f%% |\n", 100 * spread);
        }
    }
    return 0;
}

int run_once(const std::vector<variant> & vars, int64_t m, int64_t k, int n) {
    const int64_t k_padded = GGML_PAD(k, MATRIX_ROW_PADDING);
    uint8_t * dw; float * dx; void * dy; float * dd;
    CK(cudaMalloc(&dw, (size_t) m * (k / 32) * 18));
    CK(cudaMalloc(&dx, 8 * k * 4));
    CK(cudaMalloc(&dy, 8 * k_padded / 32 * sizeof(block_q8_1)));
    CK(cudaMalloc(&dd, 8 * m * 4));
    fill_q4_0<<<1024, 256>>>(dw, (size_t) m * (k / 32), 7);
    fill_f32<<<256, 256>>>(dx, 8 * k, 8);
    quantize(dx, dy, k, n, 0);
    for (const variant & v : vars) {
        v.fn(make_args(dw, dy, dd, m, k, 0), n);
        CK(cudaDeviceSynchronize());
    }
    std::printf("once: %zu kernels\n", vars.size());
    return 0;
}

} // namespace

int main(int argc, char ** argv) {
    g_info.device_count = 1;
    int cc_major = 0, cc_minor = 0;
    CK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0));
    CK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, 0));
    g_info.devices[0].cc = 100 * cc_major + 10 * cc_minor;
    g_info.devices[0].warp_size = 32;
    std::vector<variant> vars = all_variants();
    if (argc >= 2 && std::strcmp(argv[1], "check") == 0) {
        return run_check(vars);
    }
    auto pick = [&](const char * list) {
        std::vector<variant> out = {vars[0]};
        std::string l = std::string(",") + list + ",";
        for (size_t i = 1; i < vars.size(); ++i) {
            if (l.find(std::string(",") + vars[i].name + ",") != std::string::npos) out.push_back(vars[i]);
        }
        return out;
    };
    if (argc >= 6 && std::strcmp(argv[1], "perf") == 0) {
        std::vector<int> ns;
        for (const char * p = argv[3]; *p; ++p) if (*p >= '1' && *p <= '8') ns.push_back(*p - '0');
        return run_perf(argc >= 7 ? pick(argv[6]) : vars, argv[2], ns, std::atoi(argv[4]), std::atoi(argv[5]));
    }
    if (argc >= 5 && std::strcmp(argv[1], "once") == 0) {
        const std::string s = argv[2];
        return run_once(argc >= 5 ? pick(argv[4]) : vars, std::atoll(s.c_str()), std::atoll(s.c_str() + s.find('x') + 1), std::atoi(argv[3]));
    }
    std::fprintf(stderr, "usage: rt_bench check | perf MxK,... NS REPS ROUNDS [VARIANTS] | once MxK N VARIANTS\n");
    return 2;
}
