package mslite.triton;

import java.util.ArrayList;
import java.util.HashMap;

/**
 * MindSpore Lite's {@code com.mindspore.config.AscendDeviceInfo}: the settings of an Ascend NPU. They are kept
 * and read back as MindSpore Lite does, so code that fills one compiles and runs; but this server has no Ascend
 * device, and {@link MSContext#addDeviceInfo(AscendDeviceInfo)} refuses it with a message saying so.
 */
public final class AscendDeviceInfo {
    private int deviceId;
    private int rankId;
    private String provider = "";
    private String insertOpConfigPath = "";
    private String inputFormat = "";
    private String inputShape = "";
    private HashMap<Integer, ArrayList<Integer>> inputShapeMap = new HashMap<>();
    private ArrayList<Integer> dynamicBatchSize = new ArrayList<>();
    private String dynamicImageSize = "";
    private int outputType;
    private String precisionMode = "enforce_fp16"; // MindSpore Lite's defaults, read back before any set
    private String opSelectImplMode = "high_performance";
    private String fusionSwitchConfigPath = "";
    private String bufferOptimizeMode = "l2_optimize";

    public AscendDeviceInfo() {}

    public int getDeviceType() {
        return DeviceType.DT_ASCEND;
    }

    public int getDeviceID() {
        return deviceId;
    }

    public void setDeviceID(int deviceId) {
        this.deviceId = deviceId;
    }

    public int getRankID() {
        return rankId;
    }

    public void setRankID(int rankId) {
        this.rankId = rankId;
    }

    public String getProvider() {
        return provider;
    }

    public void setProvider(String provider) {
        this.provider = provider;
    }

    public String getInsertOpConfigPath() {
        return insertOpConfigPath;
    }

    public void setInsertOpConfigPath(String insertOpConfigPath) {
        this.insertOpConfigPath = insertOpConfigPath;
    }

    public String getInputFormat() {
        return inputFormat;
    }

    public void setInputFormat(String inputFormat) {
        this.inputFormat = inputFormat;
    }

    public String getInputShape() {
        return inputShape;
    }

    public void setInputShape(String inputShape) {
        this.inputShape = inputShape;
    }

    public HashMap<Integer, ArrayList<Integer>> getInputShapeMap() {
        return inputShapeMap;
    }

    public void setInputShapeMap(HashMap<Integer, ArrayList<Integer>> inputShapeMap) {
        this.inputShapeMap = inputShapeMap;
    }

    public ArrayList<Integer> getDynamicBatchSize() {
        return dynamicBatchSize;
    }

    public void setDynamicBatchSize(ArrayList<Integer> dynamicBatchSize) {
        this.dynamicBatchSize = dynamicBatchSize;
    }

    public String getDynamicImageSize() {
        return dynamicImageSize;
    }

    public void setDynamicImageSize(String dynamicImageSize) {
        this.dynamicImageSize = dynamicImageSize;
    }

    public int getOutputType() {
        return outputType;
    }

    public void setOutputType(int outputType) {
        this.outputType = outputType;
    }

    public String getPrecisionMode() {
        return precisionMode;
    }

    public void setPrecisionMode(String precisionMode) {
        this.precisionMode = precisionMode;
    }

    public String getOpSelectImplMode() {
        return opSelectImplMode;
    }

    public void setOpSelectImplMode(String opSelectImplMode) {
        this.opSelectImplMode = opSelectImplMode;
    }

    public String getFusionSwitchConfigPath() {
        return fusionSwitchConfigPath;
    }

    public void setFusionSwitchConfigPath(String fusionSwitchConfigPath) {
        this.fusionSwitchConfigPath = fusionSwitchConfigPath;
    }

    public String getBufferOptimizeMode() {
        return bufferOptimizeMode;
    }

    public void setBufferOptimizeMode(String bufferOptimizeMode) {
        this.bufferOptimizeMode = bufferOptimizeMode;
    }
}
