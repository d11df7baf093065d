package mslite.triton;

/**
 * How the models of a {@link ModelGroup} share memory: MindSpore Lite's {@code ModelGroupFlag} values (its C++
 * and Python APIs have them; its Java API has no model group).
 */
public final class ModelGroupFlag {
    public static final int SHARE_WEIGHT = 1;
    public static final int SHARE_WORKSPACE = 2;
    public static final int SHARE_WEIGHT_WORKSPACE = 3;

    private ModelGroupFlag() {}

    static String name(int flags) {
        switch (flags) {
            case SHARE_WEIGHT:
                return "SHARE_WEIGHT";
            case SHARE_WORKSPACE:
                return "SHARE_WORKSPACE";
            case SHARE_WEIGHT_WORKSPACE:
                return "SHARE_WEIGHT_WORKSPACE";
            default:
                return "an unknown flag (" + flags + ")";
        }
    }
}
