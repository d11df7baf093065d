package mslite.triton;

/**
 * MindSpore Lite's model file types ({@code com.mindspore.config.ModelType}). The server tells ONNX from MindIR
 * by the file's content, so {@code MT_MINDIR} and {@code MT_ONNX} both build either; AIR and OM (Ascend's
 * formats) and MindSpore Lite's own {@code .ms} format are refused at build.
 */
public final class ModelType {
    public static final int MT_MINDIR = 0;
    public static final int MT_AIR = 1;
    public static final int MT_OM = 2;
    public static final int MT_ONNX = 3;
    /** The {@code .ms} format: {@code MT_MINDIR_OPT} in MindSpore Lite's sources, {@code MT_MINDIR_LITE} in docs. */
    public static final int MT_MINDIR_OPT = 4;
    public static final int MT_MINDIR_LITE = MT_MINDIR_OPT;

    private ModelType() {}

    /** Why a model of this type cannot be built here, or null when it can. */
    static String refusal(int modelType) {
        switch (modelType) {
            case MT_MINDIR:
            case MT_ONNX:
                return null;
            case MT_AIR:
            case MT_OM:
                return "model type " + modelType + " (AIR / OM) is an Ascend format; this server runs ONNX and MindIR "
                        + "models on CPU and GPU";
            case MT_MINDIR_OPT:
                return "model type 4 is MindSpore Lite's .ms format, which cannot be served; build the .mindir (or an "
                        + "ONNX export) the .ms file was converted from, as MT_MINDIR";
            default:
                return "unknown model type " + modelType;
        }
    }
}
