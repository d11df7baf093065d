package mslite.triton;

import java.nio.MappedByteBuffer;
import java.util.ArrayList;
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
        if (!runner.predict(getInputs(), results)) {
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
     * Gives the input tensors new shapes ({@code dims[i]} for {@code inputs.get(i)}), e.g. another batch size; set
     * their data afterwards. The server checks the shapes against the model at the next predict.
     */
    public synchronized boolean resize(List<MSTensor> inputs, int[][] dims) {
        if (!check("resize")) {
            return false;
        }
        if (inputs == null || dims == null || inputs.size() != dims.length || inputs.contains(null)) {
            return fail("resize: give one shape per input tensor");
        }
        for (int i = 0; i < dims.length; i++) {
            int[] shape = dims[i];
            if (shape == null || shape.length != inputs.get(i).getShape().length) {
                return fail("resize: input " + i + " ('" + inputs.get(i).tensorName() + "') has rank "
                        + inputs.get(i).getShape().length + "; the new shape must have the same rank");
            }
            for (int d : shape) {
                if (d <= 0) {
                    return fail("resize: input " + i + " gets a dimension of " + d + "; dimensions must be > 0");
                }
            }
        }
        for (int i = 0; i < dims.length; i++) {
            inputs.get(i).setShape(dims[i]);
            inputs.get(i).free(); // its data was for the old shape
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
        if (!runner.init(modelPath, bytes, config)) {
            return remember(runner.getLastError()); // the runner logged it
        }
        built = true;
        inputs = null;
        outputs = null;
        return true;
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
