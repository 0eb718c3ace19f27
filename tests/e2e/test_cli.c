/*
 * test_cli.c — end-to-end tests of the `deja` command: exit statuses and
 * messages for bad input, `inspect` facts, and `tokenize` against the golden
 * prompt tokens that llama.cpp produced (../shared/golden, with BOS and
 * special-token parsing, as its README says).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "test_json.h"
#include "test_run.h"


static void test_golden_tokens(const char *shared, const char *model, const char *dir, int n_prompts) {
    for (int i = 0; i < n_prompts; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "golden/%s/p%d.f32kv.json", dir, i);
        char *doc = test_read_file(test_shared_path(shared, rel), NULL);
        CHECKF(doc != NULL, "%s", rel);
        if (!doc) continue;
        char *prompt = json_string(doc, "prompt"), *want = json_ids(doc, "prompt_tokens");
        CHECK(prompt && want);
        char *out = NULL;
        int rc = RUN(&out, "tokenize", "-m", (char *)test_shared_path(shared, model), "--parse-special", "-p", prompt);
        CHECKF(rc == 0, "tokenize exit %d: %s", rc, out);
        size_t ol = strlen(out);
        while (ol && out[ol - 1] == '\n') out[--ol] = '\0';
        CHECKF(strcmp(out, want) == 0, "%s prompt %d:\n got  %s\n want %s", dir, i, out, want);
        free(out);
        free(prompt);
        free(want);
        free(doc);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *shared = argv[1];
    deja_bin = argv[2];
    const char *stories = test_shared_path(shared, "models/stories260K.gguf");
    char *out = NULL;

    /* help and usage errors */
    CHECK(RUN(&out, "--help") == 0 && strstr(out, "inspect") && strstr(out, "tokenize"));
    free(out);
    CHECK(RUN(&out, "frobnicate") != 0 && strstr(out, "unknown command"));
    free(out);
    CHECK(RUN(&out, "inspect", "--help") == 0 && strstr(out, "usage"));
    free(out);
    CHECK(RUN(&out, "tokenize", "--help") == 0 && strstr(out, "usage"));
    free(out);
    CHECK(RUN(&out, "inspect") != 0 && strstr(out, "no model"));
    free(out);
    CHECK(RUN(&out, "inspect", "--bogus", (char *)stories) != 0 && strstr(out, "unknown option"));
    free(out);
    CHECK(RUN(&out, "tokenize", "-m", (char *)stories) != 0 && strstr(out, "-p TEXT or -f FILE"));
    free(out);
    CHECK(RUN(&out, "tokenize", "-m") != 0 && strstr(out, "needs a value"));
    free(out);
    CHECK(RUN(&out, "inspect", "/nonexistent/model.gguf") != 0 && strstr(out, "/nonexistent/model.gguf"));
    free(out);
    /* the devices: the CPU table, then each Vulkan device or one line saying why there is none */
    CHECK(RUN(&out, "inspect", "--devices") == 0 && strstr(out, "cpu: ") && strstr(out, " kernel table") &&
          (strstr(out, "vulkan:0: ") || strstr(out, "vulkan: no devices: ")));
    free(out);
    setenv("DJ_VULKAN_LOADER", "/nonexistent/libvulkan.so.1", 1);
    CHECK(RUN(&out, "inspect", "--devices") == 0 && strstr(out, "vulkan: no devices: ") &&
          (strstr(out, "/nonexistent/libvulkan.so.1") || strstr(out, "built without the Vulkan backend")));
    free(out);
    unsetenv("DJ_VULKAN_LOADER");
    CHECK(RUN(&out, "inspect", "--devices", (char *)stories) != 0 && strstr(out, "--devices takes no model"));
    free(out);
    CHECK(RUN(&out, "run", "-m", (char *)stories, "-p", "Once", "--device", "gpu") != 0 &&
          strstr(out, "not cpu, vulkan or vulkan:N"));
    free(out);
    CHECK(RUN(&out, "run", "-m", (char *)stories, "-p", "Once", "--device", "vulkan:63") != 0 &&
          (strstr(out, "no such device") || strstr(out, "built without the Vulkan backend")));
    free(out);
    /* where Vulkan has a device: the same story from it as from the CPU (greedy; stories260K's
     * logits agree to ~2e-5 and no near tie falls in these 24 tokens) */
    int has_vk = RUN(&out, "inspect", "--devices") == 0 && strstr(out, "vulkan:0: ");
    free(out);
    if (has_vk) {
        char *cpu = NULL, *gpu = NULL;
        CHECK(RUN(&cpu, "run", "-m", (char *)stories, "-p", "Once upon a time", "-n", "24", "--temp", "0") == 0);
        CHECK(RUN(&gpu, "run", "-m", (char *)stories, "-p", "Once upon a time", "-n", "24", "--temp", "0", "--device",
                  "vulkan") == 0);
        const char *sc = cpu ? strstr(cpu, ", there was") : NULL, *sg = gpu ? strstr(gpu, ", there was") : NULL;
        CHECKF(sc && sg && !strncmp(sc, sg, 60), "run --device vulkan: the story differs:\n%s\n---\n%s", cpu, gpu);
        free(cpu);
        free(gpu);
    } else {
        printf("no Vulkan device: run --device vulkan not compared\n");
    }
    CHECK(RUN(&out, "tokenize", "-m", (char *)stories, "-f", "/nonexistent/prompt.txt") != 0 &&
          strstr(out, "/nonexistent/prompt.txt"));
    free(out);

    /* a truncated model: a clear message, non-zero status, no crash */
    size_t len = 0;
    char *bytes = test_read_file(stories, &len);
    CHECK(bytes != NULL && len > 100000);
    char tmp[] = "/tmp/deja_test_cli_XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0 && write(fd, bytes, len / 2) == (ssize_t)(len / 2));
    close(fd);
    int rc = RUN(&out, "inspect", tmp);
    CHECKF(rc == 1 && strstr(out, tmp) && strstr(out, "past end of file"), "rc %d: %s", rc, out);
    free(out);
    rc = RUN(&out, "tokenize", "-m", tmp, "-p", "hello");
    CHECKF(rc == 1 && strstr(out, tmp), "rc %d: %s", rc, out);
    free(out);
    unlink(tmp);
    free(bytes);

    /* inspect facts */
    rc = RUN(&out, "inspect", (char *)stories);
    CHECKF(rc == 0, "%s", out);
    CHECK(strstr(out, "architecture:    llama") != NULL);
    CHECK(strstr(out, "spm") && strstr(out, "512 tokens"));
    CHECK(strstr(out, "embedding_length") != NULL);
    free(out);
    rc = RUN(&out, "inspect", (char *)test_shared_path(shared, "models/codelm-15m-f16.gguf"), "--tensors");
    CHECKF(rc == 0, "%s", out);
    CHECK(strstr(out, "32256 tokens") && strstr(out, "bpe"));
    CHECK(strstr(out, "f16 ") != NULL && strstr(out, "token_embd.weight") != NULL);
    free(out);

    /* tokenize: BOS handling and the golden prompt tokens */
    rc = RUN(&out, "tokenize", "-m", (char *)stories, "-p", "");
    CHECKF(rc == 0 && strcmp(out, "1\n") == 0, "empty prompt gives BOS only: '%s'", out);
    free(out);
    rc = RUN(&out, "tokenize", "-m", (char *)stories, "--no-bos", "-p", "");
    CHECKF(rc == 0 && strcmp(out, "\n") == 0, "'%s'", out);
    free(out);
    test_golden_tokens(shared, "models/stories260K.gguf", "stories260K", 4);
    test_golden_tokens(shared, "models/aidreams260K.gguf", "aidreams260K", 4);
    test_golden_tokens(shared, "models/codelm-15m-f16.gguf", "codelm", 6);
    TEST_END();
}
