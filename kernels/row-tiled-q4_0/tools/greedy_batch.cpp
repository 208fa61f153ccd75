// Greedy decoding of N sequences in lockstep through libllama, for comparing two builds.
//
// Every generation step decodes exactly one token per sequence in one batch, so each
// mat-vec in the step sees N columns (N = 5..8 reaches the row-tiled Q4_0 kernel).
// For every sequence the program records the chosen tokens and a 64-bit FNV-1a hash of
// the raw bytes of every logits row it read, so two builds can be compared bit for bit,
// not only by their text.
//
// usage: greedy_batch MODEL PROMPTS_FILE N_SEQ N_PREDICT OUT_FILE [N_GPU_LAYERS]
//   PROMPTS_FILE  one prompt per line; sequence i uses line i (cycling when fewer)
//   OUT_FILE      one JSON object per sequence: seq, prompt_tokens, tokens, logits_fnv1a, text
// Exit status: 0 on success, 1 on bad usage or input, 2 on a libllama failure.

#include "llama.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

void quiet_log(ggml_log_level level, const char * text, void * /*user*/) {
    if (level >= GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

uint64_t fnv1a(uint64_t h, const void * data, size_t n) {
    const auto * p = static_cast<const unsigned char *>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

std::string json_escape(const std::string & s) {
    std::string out;
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20) {
            char buf[8];
            snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text) {
    int n = -llama_tokenize(vocab, text.c_str(), (int32_t) text.size(), nullptr, 0, true, false);
    std::vector<llama_token> toks(n);
    if (llama_tokenize(vocab, text.c_str(), (int32_t) text.size(), toks.data(), n, true, false) != n) {
        toks.clear();
    }
    return toks;
}

std::string piece(const llama_vocab * vocab, llama_token t) {
    char buf[256];
    int n = llama_token_to_piece(vocab, t, buf, sizeof buf, 0, false);
    return n > 0 ? std::string(buf, n) : std::string();
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL PROMPTS_FILE N_SEQ N_PREDICT OUT_FILE [N_GPU_LAYERS]\n", argv[0]);
        return 1;
    }
    const std::string model_path = argv[1];
    const int n_seq     = atoi(argv[3]);
    const int n_predict = atoi(argv[4]);
    const char * out_path = argv[5];
    const int n_gpu_layers = argc > 6 ? atoi(argv[6]) : 999;
    if (n_seq < 1 || n_seq > 64 || n_predict < 1) {
        fprintf(stderr, "error: N_SEQ must be 1..64 and N_PREDICT at least 1\n");
        return 1;
    }

    std::vector<std::string> prompts;
    {
        std::ifstream in(argv[2]);
        std::string line;
        while (std::getline(in, line)) {
            if (!line.empty()) {
                prompts.push_back(line);
            }
        }
    }
    if (prompts.empty()) {
        fprintf(stderr, "error: no prompts in %s\n", argv[2]);
        return 1;
    }

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = n_gpu_layers;
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (model == nullptr) {
        fprintf(stderr, "error: cannot load %s\n", model_path.c_str());
        return 2;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    std::vector<std::vector<llama_token>> prompt_toks(n_seq);
    size_t longest = 0;
    size_t total_prompt = 0;
    for (int s = 0; s < n_seq; ++s) {
        prompt_toks[s] = tokenize(vocab, prompts[s % prompts.size()]);
        if (prompt_toks[s].empty()) {
            fprintf(stderr, "error: prompt %d tokenizes to nothing\n", s);
            return 1;
        }
        longest = std::max(longest, prompt_toks[s].size());
        total_prompt += prompt_toks[s].size();
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx     = (uint32_t) (n_seq * (longest + n_predict + 16));
    cp.n_batch   = (uint32_t) std::max<size_t>(total_prompt, 512);
    cp.n_ubatch  = cp.n_batch;
    cp.n_seq_max = (uint32_t) n_seq;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) {
        fprintf(stderr, "error: cannot create a context\n");
        return 2;
    }

    // All prompts in one batch; logits only for each sequence's last prompt token.
    llama_batch batch = llama_batch_init((int32_t) std::max<size_t>(total_prompt, n_seq), 0, 1);
    std::vector<int> logit_index(n_seq);
    for (int s = 0; s < n_seq; ++s) {
        for (size_t i = 0; i < prompt_toks[s].size(); ++i) {
            const int j = batch.n_tokens++;
            batch.token[j]     = prompt_toks[s][i];
            batch.pos[j]       = (llama_pos) i;
            batch.n_seq_id[j]  = 1;
            batch.seq_id[j][0] = s;
            batch.logits[j]    = i + 1 == prompt_toks[s].size();
            if (batch.logits[j]) {
                logit_index[s] = j;
            }
        }
    }
    if (llama_decode(ctx, batch) != 0) {
        fprintf(stderr, "error: prompt decode failed\n");
        return 2;
    }

    std::vector<std::vector<llama_token>> out_toks(n_seq);
    std::vector<uint64_t> hash(n_seq, 0xcbf29ce484222325ULL);
    std::vector<std::string> text(n_seq);
    for (int step = 0; step < n_predict; ++step) {
        batch.n_tokens = 0;
        for (int s = 0; s < n_seq; ++s) {
            const float * logits = llama_get_logits_ith(ctx, logit_index[s]);
            if (logits == nullptr) {
                fprintf(stderr, "error: no logits for sequence %d at step %d\n", s, step);
                return 2;
            }
            hash[s] = fnv1a(hash[s], logits, sizeof(float) * (size_t) n_vocab);
            llama_token best = 0;
            for (llama_token t = 1; t < n_vocab; ++t) {
                if (logits[t] > logits[best]) {
                    best = t;
                }
            }
            out_toks[s].push_back(best);
            text[s] += piece(vocab, best);
            const int j = batch.n_tokens++;
            batch.token[j]     = best;
            batch.pos[j]       = (llama_pos) (prompt_toks[s].size() + step);
            batch.n_seq_id[j]  = 1;
            batch.seq_id[j][0] = s;
            batch.logits[j]    = true;
            logit_index[s]     = j;
        }
        if (step + 1 < n_predict && llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "error: decode failed at step %d\n", step);
            return 2;
        }
    }

    FILE * out = fopen(out_path, "w");
    if (out == nullptr) {
        fprintf(stderr, "error: cannot write %s\n", out_path);
        return 1;
    }
    for (int s = 0; s < n_seq; ++s) {
        fprintf(out, "{\"seq\": %d, \"prompt_tokens\": %zu, \"logits_fnv1a\": \"%016llx\", \"tokens\": [", s,
                prompt_toks[s].size(), (unsigned long long) hash[s]);
        for (size_t i = 0; i < out_toks[s].size(); ++i) {
            fprintf(out, "%s%d", i ? ", " : "", out_toks[s][i]);
        }
        fprintf(out, "], \"text\": \"%s\"}\n", json_escape(text[s]).c_str());
    }
    fclose(out);

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
