package mslite.triton;

import java.util.ArrayList;
import java.util.logging.Logger;

/**
 * MindSpore Lite's {@code com.mindspore.config.MSContext}, plus where the server is.
 *
 * <p>The server: {@link #setServerUrl} ({@code http://host:8000}), else the {@code MSLITE_TRITON_URL}
 * environment variable, else one the client starts ({@link Endpoint}). This client speaks KServe v2 over HTTP;
 * a {@code grpc://} URL is refused at build. Tensors travel as binary data by default ({@link #setBinaryData}).
 */
public final class MSContext {
    private static final Logger LOG = Logger.getLogger(MSContext.class.getName());

    private boolean initialised;
    private int threadNum;
    private int interOpParallelNum;
    private int threadAffinityMode;
    private final ArrayList<Integer> coreList = new ArrayList<>();
    private boolean enableParallel;
    private int deviceType = -1;
    private boolean enableFloat16;
    private String serverUrl;
    private boolean binaryData = true;

    /** Default context: thread_num 0 (auto), no binding. */
    public boolean init() {
        return init(0, CpuBindMode.NO_BIND, false);
    }

    public boolean init(int threadNum, int cpuBindMode) {
        return init(threadNum, cpuBindMode, false);
    }

    public boolean init(int threadNum, int cpuBindMode, boolean isEnableParallel) {
        initialised = true;
        setThreadNum(threadNum);
        setThreadAffinity(cpuBindMode);
        enableParallel = isEnableParallel;
        return true;
    }

    /** CPU or GPU; a second call is ignored with a warning (the first device wins, as the server runs one). */
    public boolean addDeviceInfo(int type, boolean isEnableFloat16) {
        return addDeviceInfo(type, isEnableFloat16, 3);
    }

    public boolean addDeviceInfo(int type, boolean isEnableFloat16, int npuFreq) {
        if (!initialised) {
            LOG.severe("addDeviceInfo: call init first");
            return false;
        }
        if (type != DeviceType.DT_CPU && type != DeviceType.DT_GPU) {
            String device = type == DeviceType.DT_ASCEND ? " (Ascend)" : type == DeviceType.DT_NPU ? " (NPU)" : "";
            LOG.severe("addDeviceInfo: device type " + type + device + " is not available on this server (CPU and GPU"
                    + " are: it runs ONNX Runtime)");
            return false;
        }
        if (deviceType >= 0) {
            LOG.warning("addDeviceInfo: device " + deviceType + " already set; " + type + " ignored");
            return true;
        }
        deviceType = type;
        enableFloat16 = isEnableFloat16;
        return true;
    }

    /**
     * An Ascend NPU: refused (false, with the reason logged), as this server runs ONNX Runtime on CPU and GPU.
     * Code written for Ascend runs here with {@code addDeviceInfo(DeviceType.DT_CPU, false)} instead.
     */
    public boolean addDeviceInfo(AscendDeviceInfo ascendDeviceInfo) {
        if (!initialised) {
            LOG.severe("addDeviceInfo: call init first");
            return false;
        }
        if (ascendDeviceInfo == null) {
            LOG.severe("addDeviceInfo: the device info must not be null");
            return false;
        }
        LOG.severe("addDeviceInfo: Ascend (device " + ascendDeviceInfo.getDeviceID() + ", rank "
                + ascendDeviceInfo.getRankID() + ", provider '" + ascendDeviceInfo.getProvider() + "') is not "
                + "available: this server runs ONNX Runtime on CPU and GPU; use addDeviceInfo(DeviceType.DT_CPU, false)"
                + " or DT_GPU");
        return false;
    }

    public void setThreadNum(int num) {
        if (num < 0) {
            LOG.severe("setThreadNum: thread num must be >= 0, got " + num);
            return;
        }
        threadNum = num;
    }

    public int getThreadNum() {
        return initialised ? threadNum : -1;
    }

    public void setInterOpParallelNum(int num) {
        if (num < 0) {
            LOG.severe("setInterOpParallelNum: must be >= 0, got " + num);
            return;
        }
        interOpParallelNum = num;
    }

    public int getInterOpParallelNum() {
        return initialised ? interOpParallelNum : -1;
    }

    /** 0 no binding, 1 big cores first, 2 middle cores first; others become 0 with a warning. */
    public void setThreadAffinity(int mode) {
        if (mode < 0 || mode > 2) {
            LOG.warning("setThreadAffinity: mode " + mode + " is invalid; using 0");
            mode = 0;
        }
        threadAffinityMode = mode;
    }

    public int getThreadAffinityMode() {
        return initialised ? threadAffinityMode : -1;
    }

    /** The cores the worker's threads are bound to (sent with the model's config, as the Python client does). */
    public void setThreadAffinity(ArrayList<Integer> cores) {
        if (cores == null || cores.contains(null)) {
            LOG.severe("setThreadAffinity: the core list must not be null or hold null");
            return;
        }
        coreList.clear();
        coreList.addAll(cores);
    }

    public ArrayList<Integer> getThreadAffinityCoreList() {
        return new ArrayList<>(coreList);
    }

    public void setEnableParallel(boolean isParallel) {
        enableParallel = isParallel;
    }

    public boolean getEnableParallel() {
        return enableParallel;
    }

    /** The server's KServe v2 HTTP address, e.g. {@code http://127.0.0.1:8000}. */
    public void setServerUrl(String url) {
        serverUrl = url;
    }

    public String getServerUrl() {
        return serverUrl;
    }

    /** true (default): tensors as KServe v2 binary data; false: as JSON arrays. */
    public void setBinaryData(boolean binary) {
        binaryData = binary;
    }

    public boolean getBinaryData() {
        return binaryData;
    }

    public void free() {
        initialised = false;
    }

    // -- read by the runner ----------------------------------------------------------------------------
    boolean isGpu() {
        return deviceType == DeviceType.DT_GPU;
    }

    boolean isEnableFloat16() {
        return enableFloat16;
    }
}
