package mslite.triton;

/** MindSpore Lite's {@code com.mindspore.config.Version}: says which library answers. */
public final class Version {
    private static final String VERSION = "MindSpore Lite API served by mslite-triton (Triton Inference Server)";

    private Version() {}

    public static String version() {
        return VERSION;
    }
}
