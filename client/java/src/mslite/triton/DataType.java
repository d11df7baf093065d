package mslite.triton;

/**
 * MindSpore Lite's data type numbers ({@code com.mindspore.config.DataType}), and their KServe v2 names.
 * {@code kNumberTypeInt}, {@code kNumberTypeUInt} and {@code kNumberTypeFloat} are MindSpore Lite's generic
 * type numbers: no tensor has them (a model's tensors have sized types), so they name no KServe type here.
 */
public final class DataType {
    public static final int kTypeUnknown = 0;
    public static final int kNumberTypeBool = 30;
    public static final int kNumberTypeInt = 31;
    public static final int kNumberTypeInt8 = 32;
    public static final int kNumberTypeInt16 = 33;
    public static final int kNumberTypeInt32 = 34;
    public static final int kNumberTypeInt64 = 35;
    public static final int kNumberTypeUInt = 36;
    public static final int kNumberTypeUInt8 = 37;
    public static final int kNumberTypeUInt16 = 38;
    public static final int kNumberTypeUInt32 = 39;
    public static final int kNumberTypeUInt64 = 40;
    public static final int kNumberTypeFloat = 41;
    public static final int kNumberTypeFloat16 = 42;
    public static final int kNumberTypeFloat32 = 43;
    public static final int kNumberTypeFloat64 = 44;

    private static final int[] TYPES = {
        kNumberTypeBool, kNumberTypeInt8, kNumberTypeInt16, kNumberTypeInt32, kNumberTypeInt64,
        kNumberTypeUInt8, kNumberTypeUInt16, kNumberTypeUInt32, kNumberTypeUInt64,
        kNumberTypeFloat16, kNumberTypeFloat32, kNumberTypeFloat64,
    };
    private static final String[] KSERVE = {
        "BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP16", "FP32", "FP64",
    };
    private static final int[] BYTES = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8};

    private DataType() {}

    /** The KServe v2 datatype ("FP32"...) of a MindSpore Lite type number. */
    public static String toKServe(int dataType) {
        return KSERVE[index(dataType)];
    }

    /** The MindSpore Lite type number of a KServe v2 datatype; kTypeUnknown when there is none (BYTES, BF16). */
    public static int fromKServe(String datatype) {
        for (int i = 0; i < KSERVE.length; i++) {
            if (KSERVE[i].equals(datatype)) {
                return TYPES[i];
            }
        }
        return kTypeUnknown;
    }

    /** Whether tensors of this type can be sent and received (it has a KServe v2 datatype). */
    static boolean isSupported(int dataType) {
        return find(dataType) >= 0;
    }

    /** Bytes per element. */
    public static int byteSize(int dataType) {
        return BYTES[index(dataType)];
    }

    private static int index(int dataType) {
        int i = find(dataType);
        if (i < 0) {
            throw new IllegalArgumentException("unsupported data type " + dataType);
        }
        return i;
    }

    private static int find(int dataType) {
        for (int i = 0; i < TYPES.length; i++) {
            if (TYPES[i] == dataType) {
                return i;
            }
        }
        return -1;
    }
}
