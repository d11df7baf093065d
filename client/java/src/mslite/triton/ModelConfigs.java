package mslite.triton;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

/**
 * RunnerConfig -> the Triton model config of an upload, with the Python client's rules
 * ({@code client/mslite_triton/_model_config.py}): MindSpore Lite's worker and thread defaults, one instance
 * group per worker, the threads and config sections as {@code mslite} backend parameters, and Triton's dynamic
 * batcher with no queue bound unless the {@code [dynamic_batching]} section sets {@code max_queue_size} above 0
 * (a bound turns off Triton's batch prefetching). Without a {@code [dynamic_batching]} section the config has
 * no batcher, and the backend's auto-complete adds one with its batch sizes (two requests per execute on CPU,
 * every queued one for a light model): Triton takes a backend's batcher only where the config has none.
 * A tuned config ({@code mslite-triton tune}'s config.ini) sizes the runner through {@code [runner] workers_num}
 * and {@code thread_num}; values set in code win, and an unknown {@code [runner]} key is refused.
 */
final class ModelConfigs {
    // Names of the wire contract (contract/mslite_contract/protocol.py); a unit test checks they match.
    static final String BATCHING_SECTION = "dynamic_batching";
    static final String MAX_BATCH_SIZE_KEY = "max_batch_size";
    static final String MAX_QUEUE_DELAY_KEY = "max_queue_delay_microseconds";
    static final String MAX_QUEUE_SIZE_KEY = "max_queue_size";
    static final String QUEUE_POLICY_KEY = "default_queue_policy";
    static final String RESIZED_INPUTS_PARAMETER = "resized_inputs";

    private ModelConfigs() {}

    static Map<String, Object> build(RunnerConfig cfg, int cores)
            throws IOException, KServeHttp.ServerError {
        return build(cfg, cores, null);
    }

    /**
     * The same, for the model built again with inputs resized to shapes its file fixes: {@code resized} (a JSON
     * object {input name: [full shape]}, or null) asks the server to make the dims those shapes change resizable.
     */
    static Map<String, Object> build(RunnerConfig cfg, int cores, String resized)
            throws IOException, KServeHttp.ServerError {
        MSContext ctx = cfg.context();
        Map<String, Map<String, String>> sections = cfg.sections();
        Map<String, String> runner = sections.getOrDefault(ModelParallelRunner.RUNNER_SECTION, Map.of());
        List<String> unknown = runner.keySet().stream()
                .filter(k -> !ModelParallelRunner.RUNNER_KEYS.contains(k)).sorted().toList();
        if (!unknown.isEmpty()) {
            throw new KServeHttp.ServerError("kLiteParamInvalid", "[" + ModelParallelRunner.RUNNER_SECTION
                    + "] has unknown keys " + unknown + "; known: " + ModelParallelRunner.RUNNER_KEYS);
        }
        int threads = ctx == null ? 0 : ctx.getThreadNum();
        if (threads <= 0) {
            threads = runnerCount(runner, ModelParallelRunner.THREADS_KEY);
        }
        int workers = cfg.workersNum();
        if (workers == 0) {
            workers = runnerCount(runner, ModelParallelRunner.WORKERS_KEY);
        }
        if (workers < 0 || workers > 5 * cores) {
            throw new KServeHttp.ServerError("kLiteParamInvalid",
                    "user set worker num " + workers + " is invalid: more than 5 x " + cores + " cores");
        }
        if (threads <= 0) { // MindSpore Lite's default: half the cores up to 16, else 8; fit the workers in
            threads = cores <= 16 ? Math.max(1, cores / 2) : 8;
            if (workers > 0 && workers * threads > cores) {
                threads = Math.max(1, cores / workers);
            }
        }
        if (workers == 0) {
            workers = Math.max(1, cores / threads);
        }
        boolean gpu = ctx != null && ctx.isGpu();
        List<Integer> ids = cfg.getDeviceIds().isEmpty() ? List.of(0) : cfg.getDeviceIds();
        List<Object> groups = new ArrayList<>();
        for (int i = 0; i < workers; i++) {
            groups.add(gpu ? Map.of("kind", "KIND_GPU", "count", 1, "gpus", List.of(ids.get(i % ids.size())))
                    : Map.of("kind", "KIND_CPU", "count", 1));
        }
        Map<String, String> params = new LinkedHashMap<>();
        params.put("thread_num", Integer.toString(threads));
        int inter = ctx == null ? 0 : ctx.getInterOpParallelNum();
        params.put("inter_op_parallel_num", Integer.toString(inter > 0 ? inter : 1));
        params.put("thread_affinity_mode", Integer.toString(ctx == null ? 0 : ctx.getThreadAffinityMode()));
        if (ctx != null && !ctx.getThreadAffinityCoreList().isEmpty()) { // the backend checks it, as Python's list
            params.put("thread_affinity_core_list", ctx.getThreadAffinityCoreList().stream().map(String::valueOf)
                    .collect(Collectors.joining(",")));
        }
        params.put("precision_mode", ctx != null && ctx.isEnableFloat16() ? "preferred_fp16" : "enforce_fp32");
        if (resized != null) {
            params.put(RESIZED_INPUTS_PARAMETER, resized);
        }
        Map<String, String> batching = sections.getOrDefault(BATCHING_SECTION, Map.of());
        sections.forEach((section, entries) -> {
            if (!BATCHING_SECTION.equals(section) && !ModelParallelRunner.RUNNER_SECTION.equals(section)) {
                entries.forEach((k, v) -> params.put(section + "." + k, v));
            }
        });
        Map<String, Object> wrapped = new LinkedHashMap<>();
        params.forEach((k, v) -> wrapped.put(k, Map.of("string_value", v)));

        Map<String, Object> dynamic = new LinkedHashMap<>();
        dynamic.put(MAX_QUEUE_DELAY_KEY, intOf(batching, MAX_QUEUE_DELAY_KEY, 0));
        int queueBound = intOf(batching, MAX_QUEUE_SIZE_KEY, 0);
        if (queueBound > 0) { // opt-in, as 0 means no bound in Triton too
            dynamic.put(QUEUE_POLICY_KEY, Map.of(MAX_QUEUE_SIZE_KEY, queueBound));
        }
        Map<String, Object> config = new LinkedHashMap<>();
        config.put("backend", "mslite");
        config.put("instance_group", groups);
        if (!batching.isEmpty()) { // without one, auto-complete adds the batcher with the backend's sizes
            config.put(BATCHING_SECTION, dynamic);
        }
        config.put("parameters", wrapped);
        if (batching.containsKey(MAX_BATCH_SIZE_KEY)) {
            config.put(MAX_BATCH_SIZE_KEY, intOf(batching, MAX_BATCH_SIZE_KEY, 0));
        }
        return config;
    }

    /** {@code <stem>_<hash>}: the same file and config map to the same server model (and reuse it). */
    static String name(Path path, Map<String, Object> config, byte[] model) {
        String stem = path.getFileName().toString().replaceFirst("\\.[^.]*$", "").replaceAll("[^A-Za-z0-9_]", "_");
        stem = stem.isEmpty() ? "model" : stem.substring(0, Math.min(40, stem.length()));
        return stem + "_" + sha256Hex(Json.write(config).getBytes(StandardCharsets.UTF_8), model).substring(0, 12);
    }

    /** A count of the {@code [runner]} section (0 where absent: the code's settings and defaults decide). */
    private static int runnerCount(Map<String, String> runner, String key) throws KServeHttp.ServerError {
        String value = runner.getOrDefault(key, "0").trim();
        if (!value.matches("[0-9]{1,9}")) {
            throw new KServeHttp.ServerError("kLiteParamInvalid", "[" + ModelParallelRunner.RUNNER_SECTION + "] "
                    + key + " must be a non-negative int, got '" + value + "'");
        }
        return Integer.parseInt(value);
    }

    private static int intOf(Map<String, String> section, String key, int otherwise)
            throws KServeHttp.ServerError {
        if (!section.containsKey(key)) {
            return otherwise;
        }
        try {
            int v = Integer.parseInt(section.get(key).trim());
            if (v >= 0) {
                return v;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new KServeHttp.ServerError("kLiteParamInvalid",
                "[" + BATCHING_SECTION + "] " + key + " must be an int >= 0, got '" + section.get(key) + "'");
    }

    private static String sha256Hex(byte[]... parts) {
        try {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            for (byte[] p : parts) {
                md.update(p);
            }
            StringBuilder hex = new StringBuilder();
            for (byte b : md.digest()) {
                hex.append(String.format("%02x", b));
            }
            return hex.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e); // every JDK has SHA-256
        }
    }
}
