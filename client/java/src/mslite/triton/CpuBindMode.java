package mslite.triton;

/** MindSpore Lite's core-binding modes ({@code com.mindspore.config.CpuBindMode}). */
public final class CpuBindMode {
    public static final int NO_BIND = 0;
    public static final int HIGHER_CPU = 1;
    public static final int MID_CPU = 2;

    private CpuBindMode() {}
}
