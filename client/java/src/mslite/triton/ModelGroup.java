package mslite.triton;

import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.logging.Logger;

/**
 * MindSpore Lite's model group (its C++ {@code mindspore::ModelGroup} and Python {@code ModelGroup}; its Java API
 * has none), with the same rules as this library's C++ and Python clients:
 *
 * <ul>
 *   <li>{@link ModelGroupFlag#SHARE_WEIGHT}: the group's {@link Model}s built from the same bytes share one server
 *       model (one set of workers, one copy of the weights), even when their contexts differ: the first build's
 *       settings serve them all.
 *   <li>{@link ModelGroupFlag#SHARE_WORKSPACE}: nothing to share (each worker process sizes its own workspace):
 *       {@code addModel} of paths or buffers and {@code calMaxSizeOfWorkspace} check their arguments.
 * </ul>
 *
 * <p>{@code addModel} takes what MindSpore Lite's cloud runtime takes under each flag: paths under any flag,
 * buffers under {@code SHARE_WORKSPACE} only, {@code Model}s under {@code SHARE_WEIGHT} only. Calls return false
 * on failure, with the reason ({@code kLiteError: Only support share weight ...}) logged and in
 * {@link #getLastError()}.
 */
public final class ModelGroup {
    private static final Logger LOG = Logger.getLogger(ModelGroup.class.getName());
    private static final String ADD = "addModel";
    private static final String CAL = "calMaxSizeOfWorkspace";

    private final int flags;
    private final List<String> paths = new ArrayList<>();
    private final Map<String, String> built = new HashMap<>(); // the bytes' SHA-256 -> their server model
    private String lastError = "";

    /** A group sharing workspaces ({@link ModelGroupFlag#SHARE_WORKSPACE}), MindSpore Lite's default. */
    public ModelGroup() {
        this(ModelGroupFlag.SHARE_WORKSPACE);
    }

    public ModelGroup(int flags) {
        this.flags = flags;
    }

    public int getFlags() {
        return flags;
    }

    /**
     * Adds models: all paths ({@code String}, any flag), all model buffers ({@code ByteBuffer},
     * {@code SHARE_WORKSPACE} only) or all {@link Model}s not built yet ({@code SHARE_WEIGHT} only), as the Python
     * client's {@code add_model} takes a list of either kind.
     */
    public synchronized boolean addModel(List<?> models) {
        if (models == null || models.isEmpty()) {
            return fail(ADD, "kLiteParamInvalid", "the list of models is empty");
        }
        Class<?> kind = models.get(0) instanceof String ? String.class : models.get(0) instanceof ByteBuffer
                ? ByteBuffer.class : models.get(0) instanceof Model ? Model.class : null;
        for (int i = 0; i < models.size(); i++) {
            if (kind == null || !kind.isInstance(models.get(i))) {
                return fail(ADD, "kLiteParamInvalid", "models must be all String (paths), all ByteBuffer or all "
                        + "Model; element " + i + " is " + (models.get(i) == null ? "null" : models.get(i).getClass()));
            }
        }
        if (kind == String.class) {
            models.forEach(p -> paths.add((String) p));
            return true;
        }
        if (kind == ByteBuffer.class) {
            return flags == ModelGroupFlag.SHARE_WORKSPACE || fail(ADD, "kLiteError",
                    "Only support share workspace for addModel of model buffers: this group was made with "
                            + ModelGroupFlag.name(flags));
        }
        if (flags != ModelGroupFlag.SHARE_WEIGHT) {
            return fail(ADD, "kLiteError", "Only support share weight for addModel of Model objects: this group was "
                    + "made with " + ModelGroupFlag.name(flags));
        }
        for (Object o : models) {
            String[] refused = ((Model) o).joinable(this); // {status, reason}, or null
            if (refused != null) {
                return fail(ADD, refused[0], refused[1]);
            }
        }
        models.forEach(o -> ((Model) o).join(this));
        return true;
    }

    /**
     * MindSpore Lite sizes the shared workspace here; workers size their own, so this checks its arguments: false
     * for a null context, an Ascend model type (the workspace it sizes is Ascend memory), or paths added to a group
     * of an unknown flag.
     */
    public synchronized boolean calMaxSizeOfWorkspace(int modelType, MSContext context) {
        if (context == null) {
            return fail(CAL, "kLiteNullptr", "the context is null");
        }
        if (modelType == ModelType.MT_AIR || modelType == ModelType.MT_OM) {
            return fail(CAL, "kLiteNotSupport", "the shared workspace is Ascend device memory, and this server runs "
                    + "CPU and GPU workers (each sizes its own workspace)");
        }
        if (!paths.isEmpty() && ModelGroupFlag.name(flags).startsWith("an unknown")) {
            return fail(CAL, "kLiteError", "Only Support share weight and share workspace: this group was made "
                    + "with " + ModelGroupFlag.name(flags));
        }
        paths.clear(); // sized: MindSpore Lite forgets the paths it has planned
        return true;
    }

    /** Why the last failed call failed ("" if none failed). */
    public synchronized String getLastError() {
        return lastError;
    }

    // -- what a member's build asks ------------------------------------------------------------------------
    /** The server model a member built from these bytes, when the group shares weights; else null. */
    synchronized String shared(byte[] model) {
        return sharesWeights() ? built.get(digest(model)) : null;
    }

    synchronized void record(byte[] model, String serverModel) {
        if (sharesWeights()) {
            built.putIfAbsent(digest(model), serverModel);
        }
    }

    boolean sharesWeights() {
        return flags == ModelGroupFlag.SHARE_WEIGHT || flags == ModelGroupFlag.SHARE_WEIGHT_WORKSPACE;
    }

    private static String digest(byte[] model) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(model));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e); // every JDK has SHA-256
        }
    }

    private boolean fail(String call, String status, String reason) {
        lastError = call + " failed! Error is " + status + ": " + reason;
        LOG.severe(lastError);
        return false;
    }
}
