package mslite.triton;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.logging.Logger;

/**
 * MindSpore Lite's {@code com.mindspore.ModelParallelRunner}, served by Triton: {@code init} uploads the ONNX
 * file with one instance group per worker (or binds to {@code triton://NAME}, a model already in the server's
 * repository), {@code predict} sends one KServe v2 request.
 *
 * <p>Thread-safe like MindSpore Lite's: {@code init} and {@code free} take the write lock; {@code predict},
 * {@code getInputs} and {@code getOutputs} share the read lock, so any number of them run at once (each
 * predict is its own HTTP request on the pooled client) and {@code free} waits for those in flight. Calls
 * return false or an empty list on failure, as in MindSpore Lite; the reason is logged and kept for the
 * calling thread in {@link #getLastError()}.
 */
public final class ModelParallelRunner {
    private static final Logger LOG = Logger.getLogger(ModelParallelRunner.class.getName());
    private static final String BIND_PREFIX = "triton://";
    /** The client-side config section of the pending-predict bound (never sent to the server). */
    static final String RUNNER_SECTION = "runner";
    static final String MAX_PENDING_KEY = "max_pending_predicts";
    // what `mslite-triton tune` writes into [runner]; used where the code leaves them 0, as the Python client does
    static final String WORKERS_KEY = "workers_num";
    static final String THREADS_KEY = "thread_num";
    static final List<String> RUNNER_KEYS = List.of(MAX_PENDING_KEY, WORKERS_KEY, THREADS_KEY);
    static final int DEFAULT_MAX_PENDING = 1000; // MindSpore Lite's task queue bound (kNumMaxTaskQueueSize)

    private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    private final ThreadLocal<String> lastError = ThreadLocal.withInitial(() -> "");
    private KServeHttp server;
    private String modelName;
    private List<ServedModel.TensorSpec> inputSpecs;
    private List<ServedModel.TensorSpec> outputSpecs;
    private boolean binaryData = true;
    private int maxPending = DEFAULT_MAX_PENDING; // 0: no bound
    private final AtomicInteger pending = new AtomicInteger();
    private volatile List<KServeHttp.Output> last; // the outputs of the last predict that succeeded
    // what init uploaded, to build the model again with resized inputs (source null: bound with triton://)
    private String source;
    private byte[] sourceBytes; // a buffer's model; null: read source again
    private RunnerConfig sourceConfig;
    private final Map<String, String> resized = new HashMap<>(); // Resizing.fixedDimsChanged's key -> model

    /** Builds with default settings: the server as {@link Endpoint} finds it, workers from the core count. */
    public boolean init(String modelPath) {
        RunnerConfig config = new RunnerConfig();
        config.init();
        return init(modelPath, config);
    }

    /** Uploads (or reuses) the model at {@code modelPath}, or binds to {@code triton://NAME}. */
    public boolean init(String modelPath, RunnerConfig runnerConfig) {
        if (modelPath == null || runnerConfig == null) {
            return fail("init: model path and runner config must not be null");
        }
        return init(modelPath, null, runnerConfig);
    }

    /**
     * The model in {@code model} (a whole ONNX or MindIR file; null: read {@code modelPath}, or bind to
     * {@code triton://NAME}); {@code modelPath} names it on the server and in messages.
     */
    boolean init(String modelPath, byte[] model, RunnerConfig runnerConfig) {
        lock.writeLock().lock();
        try {
            if (server != null) {
                LOG.warning("ModelParallelRunner is already initialised with '" + modelName + "'");
                return true;
            }
            String bound = runnerConfig.sections().getOrDefault(RUNNER_SECTION, Map.of())
                    .getOrDefault(MAX_PENDING_KEY, Integer.toString(DEFAULT_MAX_PENDING)).trim();
            if (!bound.matches("[0-9]{1,9}")) {
                return fail("ModelParallelRunner's init failed! Error is [" + RUNNER_SECTION + "] " + MAX_PENDING_KEY
                        + " must be a non-negative int, got '" + bound + "'");
            }
            MSContext ctx = runnerConfig.context();
            KServeHttp http = Endpoint.connect(ctx != null ? ctx.getServerUrl() : null);
            String name;
            if (model == null && modelPath.startsWith(BIND_PREFIX)) {
                name = modelPath.substring(BIND_PREFIX.length());
            } else {
                Path path = Paths.get(modelPath);
                if (model == null && !Files.isRegularFile(path)) {
                    throw new IOException("model_path does not exist: " + path);
                }
                byte[] bytes = model != null ? model : Files.readAllBytes(path);
                name = ServedModel.upload(http, path, bytes, runnerConfig, null);
            }
            ServedModel.Served served = ServedModel.describe(http, name);
            inputSpecs = served.inputs();
            outputSpecs = served.outputs();
            source = model == null && modelPath.startsWith(BIND_PREFIX) ? null : modelPath;
            sourceBytes = model;
            sourceConfig = runnerConfig;
            resized.clear();
            binaryData = ctx == null || ctx.getBinaryData();
            maxPending = Integer.parseInt(bound);
            modelName = name;
            server = http;
            return true;
        } catch (KServeHttp.ServerError e) {
            return fail("ModelParallelRunner's init failed! Error is " + e);
        } catch (IOException e) {
            return fail("ModelParallelRunner's init failed! Error is kLiteFileError: " + e.getMessage());
        } finally {
            lock.writeLock().unlock();
        }
    }

    /** Fresh input tensors (name, type, shape; no data) on every call; a dynamic batch axis shows as 1. */
    public List<MSTensor> getInputs() {
        return tensors(true);
    }

    /**
     * Fresh output tensors: holding the outputs of the last predict that succeeded (of any thread), as MindSpore
     * Lite's do; before any predict, name, type and shape with no data.
     */
    public List<MSTensor> getOutputs() {
        return tensors(false);
    }

    /**
     * One request, on whichever worker is free. A non-empty {@code outputs} is filled in place (by position);
     * an empty one gets new tensors appended.
     */
    public boolean predict(List<MSTensor> inputs, List<MSTensor> outputs) {
        return predict(inputs, outputs, true);
    }

    /**
     * {@link #predict(List, List)}; with {@code rebuild} (the runner's, as MindSpore Lite's workers resize),
     * shapes in dims the model fixes are served by the model built again for them, once per set of such dims;
     * without (a Model's: it resizes first), the server refuses them.
     */
    boolean predict(List<MSTensor> inputs, List<MSTensor> outputs, boolean rebuild) {
        if (inputs == null || outputs == null || inputs.isEmpty()) {
            return fail("predict: inputs must be a non-empty list and outputs a list");
        }
        lock.readLock().lock();
        try {
            if (server == null) {
                return fail("predict failed! Error is kLiteError: call init first");
            }
            if (inputs.size() != inputSpecs.size()) {
                return fail("model input len:" + inputSpecs.size() + " not equal input len:" + inputs.size() + "!");
            }
            List<String> names = new ArrayList<>();
            for (int i = 0; i < inputs.size(); i++) {
                MSTensor t = inputs.get(i);
                if (t == null || !t.hasData() || t.elementsNum() < 0) {
                    return fail("predict: input " + i + " has no data or a dynamic shape; set its shape and data");
                }
                if (t.dataBytes() != t.size()) {
                    return fail("predict failed! Error is kLiteInputTensorError: input " + i + " ('" + t.tensorName()
                            + "') holds " + t.dataBytes() + " bytes, its shape " + Arrays.toString(t.getShape())
                            + " needs " + t.size() + " (set data after changing the shape)");
                }
                names.add(inputSpecs.get(i).name);
            }
            if (!outputs.isEmpty() && (outputs.size() != outputSpecs.size() || outputs.contains(null))) {
                return fail("predict: outputs must be empty or hold one tensor per model output ("
                        + outputSpecs.size() + ")");
            }
            List<String> wanted = new ArrayList<>();
            for (ServedModel.TensorSpec s : outputSpecs) {
                wanted.add(s.name);
            }
            String target = modelName;
            if (rebuild) {
                target = servingFor(inputs);
            }
            List<KServeHttp.Output> answered;
            // MindSpore Lite's task-queue bound, kept in the caller's runner: refused at once, nothing sent
            if (pending.incrementAndGet() > maxPending && maxPending > 0) {
                pending.decrementAndGet();
                return fail("predict failed! Error is kLiteServiceDeny: The number of waiting tasks in the queue "
                        + "exceeds the limit: " + maxPending + " predicts of this runner are in flight ([" + RUNNER_SECTION
                        + "] " + MAX_PENDING_KEY + "=" + maxPending + ")");
            }
            try {
                answered = server.infer(target, names, inputs, wanted, binaryData);
            } finally {
                pending.decrementAndGet();
            }
            // the server answers in name order; MindSpore Lite's outputs come in the model's order
            Map<String, KServeHttp.Output> byName = new HashMap<>();
            answered.forEach(o -> byName.put(o.name, o));
            List<KServeHttp.Output> result = new ArrayList<>();
            for (String name : wanted) {
                if (!byName.containsKey(name)) {
                    return fail("predict failed! Error is kLiteError: the server's answer has no output '" + name
                            + "'");
                }
                result.add(byName.get(name));
            }
            last = result;
            boolean fillInPlace = !outputs.isEmpty();
            for (int i = 0; i < result.size(); i++) {
                KServeHttp.Output o = result.get(i);
                if (fillInPlace) {
                    outputs.get(i).fill(o.dataType, o.shape, o.data);
                } else {
                    outputs.add(new MSTensor(o.name, o.dataType, o.shape, o.data));
                }
            }
            return true;
        } catch (KServeHttp.ServerError e) {
            return fail("predict failed! Error is " + e);
        } catch (IllegalArgumentException e) {
            return fail("predict failed! Error is kLiteNotSupport: " + e.getMessage());
        } catch (IOException e) {
            return fail("predict failed! Error is kLiteFileError: " + e.getMessage());
        } finally {
            lock.readLock().unlock();
        }
    }

    /**
     * {@code Model.resize}'s half: when {@code shapes} (one per input, in order) change a dim the served model
     * fixes, the model built again with those dims resizable serves from now on (the one before keeps serving
     * until that succeeds). False with the reason in {@link #getLastError()} otherwise.
     */
    boolean resizeServed(List<int[]> shapes) {
        lock.writeLock().lock();
        try {
            if (changedDims(shapes).isEmpty()) {
                return true;
            }
            ServedModel.Served served = rebuild(shapes);
            modelName = served.name();
            inputSpecs = served.inputs();
            outputSpecs = served.outputs();
            last = null;
            return true;
        } catch (KServeHttp.ServerError e) {
            return fail("resize failed! Error is " + e);
        } catch (IOException e) {
            return fail("resize failed! Error is kLiteFileError: " + e.getMessage());
        } finally {
            lock.writeLock().unlock();
        }
    }

    /** Waits for calls in flight, then forgets the model (it stays loaded on the server for other clients). */
    public void free() {
        lock.writeLock().lock();
        try {
            server = null;
            modelName = null;
            inputSpecs = null;
            outputSpecs = null;
            last = null;
            source = null;
            sourceBytes = null;
            resized.clear();
        } finally {
            lock.writeLock().unlock();
        }
    }

    /**
     * A runner bound to a model another {@link Model} of its {@link ModelGroup} built from the same bytes: what a
     * resize builds again is this model's own file ({@code modelPath}) or buffer ({@code model}, when not null).
     */
    boolean rebuildsFrom(String modelPath, byte[] model) {
        lock.writeLock().lock();
        try {
            source = modelPath;
            sourceBytes = model;
            return true;
        } finally {
            lock.writeLock().unlock();
        }
    }

    /** The server-side model name (null before init). */
    public String getModelName() {
        lock.readLock().lock();
        try {
            return modelName;
        } finally {
            lock.readLock().unlock();
        }
    }

    /** Predicts of this runner now in flight (sent, not yet answered). */
    public int getPendingPredicts() {
        return pending.get();
    }

    /** Why this thread's last failed call failed ("" if none failed). */
    public String getLastError() {
        return lastError.get();
    }

    // -- internals ---------------------------------------------------------------------------------------
    /** The server model for these inputs' shapes (called under the read lock). */
    private String servingFor(List<MSTensor> inputs) throws KServeHttp.ServerError, IOException {
        List<int[]> shapes = new ArrayList<>();
        inputs.forEach(t -> shapes.add(t.getShape()));
        String key = changedDims(shapes);
        if (key.isEmpty()) {
            return modelName;
        }
        synchronized (resized) { // one rebuild at a time; later predicts of the same dims reuse it
            String found = resized.get(key);
            if (found == null) {
                found = rebuild(shapes).name();
                resized.put(key, found);
            }
            return found;
        }
    }

    private String changedDims(List<int[]> shapes) {
        return Resizing.fixedDimsChanged(ServedModel.names(inputSpecs), ServedModel.declared(inputSpecs), shapes);
    }

    /** The model built again with {@code shapes} in the dims it fixes, under its own name. */
    private ServedModel.Served rebuild(List<int[]> shapes) throws KServeHttp.ServerError, IOException {
        List<String> names = ServedModel.names(inputSpecs);
        if (source == null) {
            throw Resizing.bound(names, shapes);
        }
        Path path = Paths.get(source);
        byte[] model = sourceBytes != null ? sourceBytes : Files.readAllBytes(path);
        String name = ServedModel.upload(server, path, model, sourceConfig, Resizing.parameter(names, shapes));
        return ServedModel.describe(server, name);
    }

    private List<MSTensor> tensors(boolean in) {
        lock.readLock().lock();
        try {
            List<MSTensor> out = new ArrayList<>();
            if (server == null) {
                fail((in ? "getInputs" : "getOutputs") + ": call init first");
                return out;
            }
            List<KServeHttp.Output> results = last;
            if (!in && results != null) {
                for (KServeHttp.Output o : results) {
                    out.add(new MSTensor(o.name, o.dataType, o.shape, o.data));
                }
                return out;
            }
            for (ServedModel.TensorSpec s : in ? inputSpecs : outputSpecs) {
                out.add(new MSTensor(s.name, s.dataType, s.shape, null));
            }
            return out;
        } finally {
            lock.readLock().unlock();
        }
    }

    private boolean fail(String message) {
        lastError.set(message);
        LOG.severe(message);
        return false;
    }
}
