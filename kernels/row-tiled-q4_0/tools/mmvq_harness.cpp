// One ggml MUL_MAT (q4_0 weights x f32 activations) on a ggml backend, for the row-tiled
// Q4_0 kernel checks. Linked against the ggml build under test; which build is picked up is
// decided by the library search path, and the program prints the file it got.
//
//   mmvq_harness check BACKEND MANIFEST
//       MANIFEST lines: "name m k n wfile xfile outfile". wfile holds m*k/32 q4_0 blocks
//       (fp16 scale + 16 bytes of nibbles each, row after row), xfile at least n*k float32
//       (column after column; the first n columns are used), outfile receives n*m float32.
//       The output tensor is filled with NaN bytes before every run.
//   mmvq_harness perf BACKEND M K N_LIST REPS
//       N_LIST is comma separated. For each n: a graph of G independent MUL_MAT nodes that
//       cycle through enough distinct weight tensors (at least 512 MiB in all) that no node
//       finds its weights in L2; prints
//       "perf m k n nodes nbuf median_us p10_us p90_us min_us" per n, times per MUL_MAT node
//       (q8_1 quantization of the activations + the mat-vec kernel), medians over REPS runs
//       of the whole graph.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string & msg) {
    std::fprintf(stderr, "mmvq_harness: %s\n", msg.c_str());
    std::exit(2);
}

std::vector<uint8_t> read_file(const std::string & path, size_t min_bytes) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        die("cannot open " + path);
    }
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (data.size() < min_bytes) {
        die(path + ": " + std::to_string(data.size()) + " bytes, need " + std::to_string(min_bytes));
    }
    return data;
}

void write_file(const std::string & path, const void * data, size_t n) {
    std::ofstream f(path, std::ios::binary);
    f.write((const char *) data, (std::streamsize) n);
    if (!f) {
        die("cannot write " + path);
    }
}

ggml_backend_t init_backend(const std::string & name) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(name.c_str());
    if (!dev) {
        die("no backend device named " + name);
    }
    Dl_info info{};
    if (dladdr((const void *) ggml_backend_dev_backend_reg(dev), &info) && info.dli_fname) {
        std::printf("backend %s from %s\n", name.c_str(), info.dli_fname);
    }
    ggml_backend_t backend = ggml_backend_dev_init(dev, nullptr);
    if (!backend) {
        die("cannot init backend " + name);
    }
    return backend;
}

struct xorshift {
    uint64_t s;
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    float uniform() { // [-1, 1)
        return (float) ((next() >> 40) * (1.0 / 8388608.0)) - 1.0f;
    }
};

constexpr size_t Q4_0_BLOCK_BYTES = 18;

int run_check(ggml_backend_t backend, const std::string & manifest) {
    std::ifstream mf(manifest);
    if (!mf) {
        die("cannot open " + manifest);
    }
    std::string line;
    int ncases = 0;
    while (std::getline(mf, line)) {
        if (line.empty() || line[0] == '#') {
            continue;
        }
        std::istringstream ls(line);
        std::string name, wfile, xfile, ofile;
        int64_t m = 0, k = 0, n = 0;
        if (!(ls >> name >> m >> k >> n >> wfile >> xfile >> ofile) || m <= 0 || k <= 0 || k % 32 != 0 || n <= 0) {
            die("bad manifest line: " + line);
        }
        const size_t wbytes = (size_t) m * (k / 32) * Q4_0_BLOCK_BYTES;
        const size_t xbytes = (size_t) n * k * sizeof(float);
        const std::vector<uint8_t> w = read_file(wfile, wbytes);
        const std::vector<uint8_t> x = read_file(xfile, xbytes);

        ggml_init_params params = { 8*ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true };
        ggml_context * ctx = ggml_init(params);
        ggml_tensor * tw = ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_0, k, m);
        ggml_tensor * tx = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
        ggml_tensor * out = ggml_mul_mat(ctx, tw, tx);
        ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
        if (!buf) {
            die("allocation failed for " + name);
        }
        if (ggml_nbytes(tw) != wbytes || ggml_nbytes(out) != (size_t) n * m * sizeof(float)) {
            die("unexpected tensor sizes for " + name);
        }
        ggml_backend_tensor_set(tw, w.data(), 0, wbytes);
        ggml_backend_tensor_set(tx, x.data(), 0, xbytes);
        std::vector<uint8_t> poison(ggml_nbytes(out), 0xFF); // NaN in every float
        ggml_backend_tensor_set(out, poison.data(), 0, poison.size());
        if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) {
            die("compute failed for " + name);
        }
        std::vector<float> result((size_t) n * m);
        ggml_backend_tensor_get(out, result.data(), 0, result.size() * sizeof(float));
        write_file(ofile, result.data(), result.size() * sizeof(float));
        ggml_backend_buffer_free(buf);
        ggml_free(ctx);
        ++ncases;
    }
    std::printf("check: %d cases run\n", ncases);
    return 0;
}

int run_perf(ggml_backend_t backend, int64_t m, int64_t k, const std::vector<int64_t> & ns, int reps) {
    if (k % 32 != 0) {
        die("k must be a multiple of 32");
    }
    const size_t wbytes = (size_t) m * (k / 32) * Q4_0_BLOCK_BYTES;
    const size_t rotate_bytes = (size_t) 512 << 20;
    const int nbuf = (int) std::max<size_t>(4, (rotate_bytes + wbytes - 1) / wbytes);
    const int nodes = nbuf * std::max(1, (64 + nbuf - 1) / nbuf);

    const size_t n_tensors = nbuf + ns.size() * (1 + nodes);
    ggml_init_params params = {
        n_tensors*ggml_tensor_overhead() + ns.size()*ggml_graph_overhead_custom(nodes + 16, false), nullptr, true };
    ggml_context * ctx = ggml_init(params);

    std::vector<ggml_tensor *> w(nbuf);
    for (auto & t : w) {
        t = ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_0, k, m);
    }
    std::vector<ggml_tensor *> xs;
    std::vector<ggml_cgraph *> graphs;
    for (const int64_t n : ns) {
        ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
        ggml_cgraph * gf = ggml_new_graph_custom(ctx, nodes + 16, false);
        for (int g = 0; g < nodes; ++g) {
            ggml_build_forward_expand(gf, ggml_mul_mat(ctx, w[g % nbuf], x));
        }
        xs.push_back(x);
        graphs.push_back(gf);
    }
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (!buf) {
        die("allocation failed");
    }

    xorshift rng{0x9E3779B97F4A7C15ull ^ (uint64_t) (m * 1000003 + k)};
    std::vector<uint8_t> host(wbytes);
    for (auto * t : w) {
        for (size_t b = 0; b < wbytes / Q4_0_BLOCK_BYTES; ++b) {
            uint8_t * blk = host.data() + b*Q4_0_BLOCK_BYTES;
            const ggml_fp16_t d = ggml_fp32_to_fp16(0.02f * rng.uniform() + 1e-3f);
            std::memcpy(blk, &d, sizeof(d));
            const uint64_t q0 = rng.next();
            const uint64_t q1 = rng.next();
            std::memcpy(blk + 2, &q0, 8);
            std::memcpy(blk + 10, &q1, 8);
        }
        ggml_backend_tensor_set(t, host.data(), 0, wbytes);
    }
    for (auto * x : xs) {
        std::vector<float> v(ggml_nelements(x));
        for (auto & e : v) {
            e = rng.uniform();
        }
        ggml_backend_tensor_set(x, v.data(), 0, v.size()*sizeof(float));
    }

    for (size_t i = 0; i < ns.size(); ++i) {
        for (int warm = 0; warm < 3; ++warm) {
            if (ggml_backend_graph_compute(backend, graphs[i]) != GGML_STATUS_SUCCESS) {
                die("compute failed");
            }
        }
        std::vector<double> us(reps);
        for (int r = 0; r < reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            if (ggml_backend_graph_compute(backend, graphs[i]) != GGML_STATUS_SUCCESS) {
                die("compute failed");
            }
            const auto t1 = std::chrono::steady_clock::now();
            us[r] = std::chrono::duration<double, std::micro>(t1 - t0).count() / nodes;
        }
        std::sort(us.begin(), us.end());
        const auto pct = [&](double p) { return us[(size_t) std::lround(p * (reps - 1))]; };
        std::printf("perf %lld %lld %lld %d %d %.3f %.3f %.3f %.3f\n", (long long) m, (long long) k, (long long) ns[i],
                    nodes, nbuf, pct(0.5), pct(0.1), pct(0.9), us[0]);
        std::fflush(stdout);
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return 0;
}

} // namespace

int main(int argc, char ** argv) {
    if (argc >= 4 && std::strcmp(argv[1], "check") == 0) {
        ggml_backend_t backend = init_backend(argv[2]);
        const int rc = run_check(backend, argv[3]);
        ggml_backend_free(backend);
        return rc;
    }
    if (argc >= 7 && std::strcmp(argv[1], "perf") == 0) {
        ggml_backend_t backend = init_backend(argv[2]);
        std::vector<int64_t> ns;
        std::stringstream ss(argv[5]);
        std::string item;
        while (std::getline(ss, item, ',')) {
            ns.push_back(std::atoll(item.c_str()));
        }
        const int rc = run_perf(backend, std::atoll(argv[3]), std::atoll(argv[4]), ns, std::atoi(argv[6]));
        ggml_backend_free(backend);
        return rc;
    }
    std::fprintf(stderr, "usage: %s check BACKEND MANIFEST | perf BACKEND M K N_LIST REPS\n", argv[0]);
    return 2;
}
