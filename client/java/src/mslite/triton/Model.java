package mslite.triton;

import java.io.IOException;
import java.nio.MappedByteBuffer;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.logging.Logger;

/**
 * MindSpore Lite's {@code com.mindspore.Model} for inference: one model on the server, one worker, predicts one
 * at a time (its methods are synchronised, as MindSpore Lite's model takes a lock around each predict).
 *
 * <p>As in MindSpore Lite, {@code getInputs} returns the same tensors on every call (fill them, then
 * {@code predict()}), and {@code getOutputs} after a predict returns tensors holding its results. Calls return
 * false, null or an empty list on failure; the reason is logged and kept in {@link #getLastError()}. Training,
 * export and encrypted models are MindSpore Lite's own and not served: those calls return false with a message.
 */
public final class Model {
    private static final Logger LOG = Logger.getLogger(Model.class.getName());

    private final ModelParallelRunner runner = new ModelParallelRunner();
    private final HashMap<String, HashMap<String, String>> configInfo = new HashMap<>();
    private String configPath = "";
    private boolean built;
    private List<MSTensor> inputs; // the same tensors on every getInputs, as MindSpore Lite's
    private List<MSTensor> outputs; // the last predict's, or null before one
    private String lastError = "";
    private ModelGroup group; // set by ModelGroup.addModel, before build

    public Model() {}

    /**
     * Builds MindSpore Lite's two models of a distributed (Ascend GE) run, a model and its incremental model,
     * each from its file with {@code context} and the config file {@code config}: here two models of their own.
     * An empty list when either fails (the reason is logged).
     */
    public static List<Model> build(String modelPath, String incModelPath, int modelType, MSContext context,
            String config) {
        List<Model> models = new ArrayList<>();
        for (String path : new String[] {modelPath, incModelPath}) {
            Model m = new Model();
            if (config != null && !config.isEmpty()) {
                m.loadConfig(config);
            }
            if (!m.build(path, modelType, context)) {
                models.forEach(Model::free);
                return new ArrayList<>();
            }
            models.add(m);
        }
        return models;
    }

    /** Uploads (or reuses) the ONNX or MindIR file at {@code modelPath}, or binds to {@code triton://NAME}. */
    public synchronized boolean build(String modelPath, int modelType, MSContext context) {
        if (context == null || modelPath == null) {
            return fail("build: model path and context must not be null");
        }
        return build(modelPath, null, modelType, context);
    }

    /** Builds from a whole ONNX or MindIR file in memory (e.g. an Android asset). */
    public synchronized boolean build(MappedByteBuffer buffer, int modelType, MSContext context) {
        if (context == null || buffer == null) {
            return fail("build: buffer and context must not be null");
        }
        byte[] bytes = new byte[buffer.remaining()];
        buffer.duplicate().get(bytes);
        return build("model", bytes, modelType, context);
    }

    /** Encrypted models: not served (the server would need the key); false with a message. */
    public boolean build(String modelPath, int modelType, MSContext context, char[] decKey, String decMode,
            String cryptoLibPath) {
        return fail("build: encrypted models are not served; decrypt the model and build it without a key");
    }

    /** Encrypted models: not served (the server would need the key); false with a message. */
    public boolean build(MappedByteBuffer buffer, int modelType, MSContext context, char[] decKey, String decMode,
            String cryptoLibPath) {
        return fail("build: encrypted models are not served; decrypt the model and build it without a key");
    }

    /** Runs the model on the data set in {@link #getInputs()}' tensors. */
    public synchronized boolean predict() {
        if (!check("predict")) {
            return false;
        }
        List<MSTensor> results = new ArrayList<>();
        if (!runner.predict(getInputs(), results, false)) { // a shape the served model cannot take: resize first
            return remember(runner.getLastError()); // the runner logged it
        }
        outputs = results;
        return true;
    }

    /** MindSpore Lite's training step; for inference the same as {@link #predict()}. */
    public boolean runStep() {
        return predict();
    }

    /**
     * Gives the input tensors new shapes ({@code dims[i]} for {@code inputs.get(i)}, of the same rank), e.g. another
     * batch size; set their data afterwards. A size in a dim the model file fixes builds the model again on the
     * server with that dim resizable (and runs it once there: a graph that cannot take the shape fails here, with
     * the reason), as the Python and C++ clients do; other shapes the server checks at the next predict.
     */
    public synchronized boolean resize(List<MSTensor> inputs, int[][] dims) {
        if (!check("resize")) {
            return false;
        }
        if (inputs == null || dims == null || inputs.size() != dims.length || inputs.contains(null)) {
            return fail("resize failed! Error is kLiteParamInvalid: give one shape per input tensor");
        }
        List<MSTensor> own = getInputs();
        List<int[]> shapes = new ArrayList<>();
        own.forEach(t -> shapes.add(t.getShape()));
        for (int i = 0; i < dims.length; i++) {
            String name = inputs.get(i).tensorName();
            int k = 0;
            while (k < own.size() && !own.get(k).tensorName().equals(name)) {
                k++;
            }
            if (k == own.size()) {
                return fail("resize failed! Error is kLiteParamInvalid: '" + name + "' is not an input of the model");
            }
            int[] shape = dims[i];
            int[] have = own.get(k).getShape();
            if (shape == null || shape.length != have.length) {
                return fail("resize failed! Error is kLiteInputParamInvalid: input '" + name + "' has " + have.length
                        + " dims " + Resizing.text(have) + ", got " + (shape == null ? "null" : Resizing.text(shape))
                        + ": a resize keeps the rank");
            }
            for (int d : shape) {
                if (d <= 0) {
                    return fail("resize failed! Error is kLiteParamInvalid: input '" + name + "' gets a dimension of "
                            + d + "; dimensions must be > 0");
                }
            }
            shapes.set(k, shape);
        }
        if (!runner.resizeServed(shapes)) {
            return remember(runner.getLastError()); // the runner logged it
        }
        for (int k = 0; k < own.size(); k++) {
            if (!Arrays.equals(own.get(k).getShape(), shapes.get(k))) {
                own.get(k).setShape(shapes.get(k));
                own.get(k).free(); // its data was for the old shape
            }
        }
        for (int i = 0; i < dims.length; i++) {
            if (!own.contains(inputs.get(i))) {
                inputs.get(i).setShape(dims[i]);
                inputs.get(i).free();
            }
        }
        return true;
    }

    /** The model's input tensors: the same ones on every call (a dynamic batch dimension reads 1). */
    public synchronized List<MSTensor> getInputs() {
        if (inputs == null) {
            inputs = built ? runner.getInputs() : new ArrayList<>();
        }
        return inputs;
    }

    /** The last predict's outputs (fresh tensors sharing its data); before any predict, shapes with no data. */
    public synchronized List<MSTensor> getOutputs() {
        if (outputs == null) {
            return built ? runner.getOutputs() : new ArrayList<>();
        }
        List<MSTensor> copies = new ArrayList<>();
        for (MSTensor t : outputs) {
            copies.add(t.share());
        }
        return copies;
    }

    /** The input tensor of this name (one of {@link #getInputs()}), or null. */
    public synchronized MSTensor getInputByTensorName(String tensorName) {
        for (MSTensor t : getInputs()) {
            if (t.tensorName().equals(tensorName)) {
                return t;
            }
        }
        return null;
    }

    /** The output tensor of this name (as {@link #getOutputs()} gives it), or null. */
    public synchronized MSTensor getOutputByTensorName(String tensorName) {
        for (MSTensor t : getOutputs()) {
            if (t.tensorName().equals(tensorName)) {
                return t;
            }
        }
        return null;
    }

    /** Not served: the server knows a model's output tensors, not its graph's nodes (use getOutputByTensorName). */
    public List<MSTensor> getOutputsByNodeName(String nodeName) {
        fail("getOutputsByNodeName: the server knows output tensors, not graph nodes; use getOutputByTensorName");
        return new ArrayList<>();
    }

    public synchronized List<String> getOutputTensorNames() {
        List<String> names = new ArrayList<>();
        for (MSTensor t : getOutputs()) {
            names.add(t.tensorName());
        }
        return names;
    }

    /** A MindSpore Lite config file for the next build (its sections go to the server, as the runner's do). */
    public synchronized boolean loadConfig(String configPath) {
        if (configPath == null || built) {
            return fail("loadConfig: give a path, before build");
        }
        this.configPath = configPath;
        return true;
    }

    /** One config section for the next build, overriding the config file's keys. */
    public synchronized boolean updateConfig(String section, HashMap<String, String> config) {
        if (section == null || config == null || built) {
            return fail("updateConfig: give a section and its keys, before build");
        }
        configInfo.put(section, new HashMap<>(config));
        return true;
    }

    /** Not served: the served model is the file that was built; false with a message. */
    public boolean export(String fileName, int quantizationType, boolean isOnlyExportInfer,
            List<String> outputTensorNames) {
        return fail("export: not served (the server runs the model file it was given; export from MindSpore)");
    }

    /** Forgets the model and its tensors (the model stays loaded on the server for other clients). */
    public synchronized void free() {
        if (inputs != null) {
            inputs.forEach(MSTensor::free);
        }
        inputs = null;
        outputs = null;
        built = false;
        runner.free();
    }

    /**
     * The model's name on the server (null before build): this library's own, as the C++ client's
     * {@code GetModelName} and the Python client's {@code served_name}, for Triton's tools pointed at it.
     */
    public synchronized String getModelName() {
        return built ? runner.getModelName() : null;
    }

    /** Why the last failed call failed ("" if none failed). */
    public synchronized String getLastError() {
        return lastError;
    }

    // -- internals ---------------------------------------------------------------------------------------
    private boolean build(String modelPath, byte[] bytes, int modelType, MSContext context) {
        String refused = ModelType.refusal(modelType);
        if (refused != null) {
            return fail("build: " + refused);
        }
        if (built) {
            LOG.warning("build: this Model is built already; free it to build another");
            return true;
        }
        RunnerConfig config = new RunnerConfig();
        config.init(context);
        config.setWorkersNum(1); // one model, one worker: MindSpore Lite's Model is a single instance
        config.setConfigPath(configPath);
        configInfo.forEach(config::setConfigInfo);
        byte[] content = bytes;
        String shared = null;
        if (group != null && group.sharesWeights() && !modelPath.startsWith("triton://")) {
            try {
                content = bytes != null ? bytes : Files.readAllBytes(Paths.get(modelPath));
            } catch (IOException | InvalidPathException e) {
                return fail("build failed! Error is kLiteFileError: model_path cannot be read: " + modelPath);
            }
            shared = group.shared(content);
        }
        boolean ok = shared == null ? runner.init(modelPath, bytes, config)
                : runner.init("triton://" + shared, null, config) && runner.rebuildsFrom(modelPath, bytes);
        if (!ok) {
            return remember(runner.getLastError()); // the runner logged it
        }
        if (group != null && shared == null && content != null) {
            group.record(content, runner.getModelName());
        }
        built = true;
        inputs = null;
        outputs = null;
        return true;
    }

    /** Why this model cannot join {@code to} ({status, reason}), or null when it can. */
    synchronized String[] joinable(ModelGroup to) {
        if (built) {
            return new String[] {"kLiteParamInvalid", "add models to a group before building them"};
        }
        if (group != null && group != to) {
            return new String[] {"kLiteError", "the model has been in another group"};
        }
        return null;
    }

    synchronized void join(ModelGroup to) {
        group = to;
    }

    private boolean check(String call) {
        return built || fail(call + ": call build first");
    }

    private boolean fail(String message) {
        LOG.severe(message);
        return remember(message);
    }

    private synchronized boolean remember(String message) {
        lastError = message;
        return false;
    }
}
