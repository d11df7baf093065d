package mslite.triton;

/** MindSpore Lite's device types ({@code com.mindspore.config.DeviceType}). */
public final class DeviceType {
    public static final int DT_CPU = 0;
    public static final int DT_GPU = 1;
    public static final int DT_NPU = 2;
    public static final int DT_ASCEND = 3;

    private DeviceType() {}
}
