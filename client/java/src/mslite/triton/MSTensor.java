package mslite.triton;

import java.lang.reflect.Array;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.List;
import java.util.logging.Logger;

/**
 * A tensor: name, MindSpore Lite data type, shape and little-endian data, with {@code com.mindspore.MSTensor}'s
 * methods and return types. Not synchronised: share tensors between threads only read-only, or give each thread
 * its own (as {@link ModelParallelRunner#getInputs()} does). Data is never changed in place (setting data
 * replaces it), so tensors may share one buffer.
 */
public final class MSTensor {
    private static final Logger LOG = Logger.getLogger(MSTensor.class.getName());

    private final String name;
    private int dataType;
    private int[] shape;
    private ByteBuffer data; // little-endian, position 0, read-only once set; null until set

    MSTensor(String name, int dataType, int[] shape, ByteBuffer data) {
        this.name = name;
        this.dataType = dataType;
        this.shape = shape.clone();
        this.data = data == null ? null : data.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
    }

    /** A tensor over a copy of {@code buffer}'s bytes (see {@link #setData(ByteBuffer)}; null: no data yet). */
    public static MSTensor createTensor(String tensorName, int dataType, int[] tensorShape, ByteBuffer buffer) {
        if (tensorName == null || tensorShape == null) {
            LOG.severe("createTensor: name and shape must not be null");
            return null;
        }
        if (!DataType.isSupported(dataType)) {
            LOG.severe("createTensor: data type " + dataType + " is not a tensor type this client sends");
            return null;
        }
        MSTensor t = new MSTensor(tensorName, dataType, tensorShape, null);
        return buffer == null || t.setData(buffer) ? t : null;
    }

    /**
     * A tensor holding a Java array (of any rank, its shape read from the array) or a boxed scalar (shape
     * {@code []}) of float, double, int, long or boolean.
     */
    public static MSTensor createTensor(String tensorName, Object obj) {
        if (tensorName == null || obj == null) {
            LOG.severe("createTensor: name and value must not be null");
            return null;
        }
        int rank = 0;
        Class<?> element = obj.getClass();
        while (element.isArray()) {
            element = element.getComponentType();
            rank++;
        }
        int dataType = javaType(element);
        if (dataType == DataType.kTypeUnknown) {
            LOG.severe("createTensor: " + element.getSimpleName() + " values are not supported (float, double, int, "
                    + "long and boolean are)");
            return null;
        }
        int[] shape = new int[rank];
        Object level = obj;
        for (int i = 0; i < rank; i++) {
            shape[i] = Array.getLength(level);
            if (shape[i] == 0) {
                LOG.severe("createTensor: '" + tensorName + "' has an empty dimension");
                return null;
            }
            level = Array.get(level, 0);
        }
        ByteBuffer b = ByteBuffer.allocate(count(shape) * DataType.byteSize(dataType)).order(ByteOrder.LITTLE_ENDIAN);
        if (!flatten(obj, rank, shape, 0, dataType, b)) {
            LOG.severe("createTensor: '" + tensorName + "' is a ragged array (its rows differ in length)");
            return null;
        }
        b.flip();
        return new MSTensor(tensorName, dataType, shape, b);
    }

    /** A float32 tensor of the given shape holding {@code values}. */
    public static MSTensor createTensor(String tensorName, int[] tensorShape, float[] values) {
        MSTensor t = createTensor(tensorName, DataType.kNumberTypeFloat32, tensorShape, null);
        return t != null && t.setData(values) ? t : null;
    }

    public String tensorName() {
        return name;
    }

    public int getDataType() {
        return dataType;
    }

    public int[] getShape() {
        return shape.clone();
    }

    /** Changes the shape (e.g. a batch of 4); set data of the matching size afterwards. */
    public boolean setShape(int[] tensorShape) {
        if (tensorShape == null) {
            LOG.severe("setShape: the shape must not be null");
            return false;
        }
        shape = tensorShape.clone();
        return true;
    }

    /** Element count of the shape; a negative (dynamic) dimension gives -1. */
    public int elementsNum() {
        for (int d : shape) {
            if (d < 0) {
                return -1;
            }
        }
        return count(shape);
    }

    /** Size in bytes of the shape's elements (-1 for a dynamic shape). */
    public long size() {
        int n = elementsNum();
        return n < 0 ? -1 : (long) n * DataType.byteSize(dataType);
    }

    /**
     * The data as MindSpore Lite gives it: {@code float[]} for float32 and float16, {@code int[]} for int32,
     * {@code long[]} for int64, {@code byte[]} (little-endian) for the other types; an empty array before any
     * data was set.
     */
    public Object getData() {
        switch (dataType) {
            case DataType.kNumberTypeFloat32:
            case DataType.kNumberTypeFloat16:
                return getFloatData();
            case DataType.kNumberTypeInt32:
                return getIntData();
            case DataType.kNumberTypeInt64:
                return getLongData();
            default:
                return getByteData();
        }
    }

    /** The raw little-endian bytes (empty when no data is set). */
    public byte[] getByteData() {
        if (data == null) {
            return new byte[0];
        }
        byte[] out = new byte[data.remaining()];
        data.duplicate().get(out);
        return out;
    }

    /** float32 data, or float16 data widened to float (empty for other types or no data). */
    public float[] getFloatData() {
        if (is(DataType.kNumberTypeFloat16)) {
            float[] out = new float[data.remaining() / 2];
            ByteBuffer b = data.duplicate().order(ByteOrder.LITTLE_ENDIAN);
            for (int i = 0; i < out.length; i++) {
                out[i] = Half.toFloat(b.getShort());
            }
            return out;
        }
        if (!is(DataType.kNumberTypeFloat32)) {
            return new float[0];
        }
        float[] out = new float[data.remaining() / 4];
        data.duplicate().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }

    public int[] getIntData() {
        if (!is(DataType.kNumberTypeInt32)) {
            return new int[0];
        }
        int[] out = new int[data.remaining() / 4];
        data.duplicate().order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(out);
        return out;
    }

    public long[] getLongData() {
        if (!is(DataType.kNumberTypeInt64)) {
            return new long[0];
        }
        long[] out = new long[data.remaining() / 8];
        data.duplicate().order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(out);
        return out;
    }

    /** Raw little-endian bytes; their count must equal {@link #size()}. */
    public boolean setData(byte[] bytes) {
        return bytes != null && setData(ByteBuffer.wrap(bytes));
    }

    /** float32 values, or float16 ones (narrowed from float, rounding to nearest even). */
    public boolean setData(float[] values) {
        if (values == null || !checkType(DataType.kNumberTypeFloat32, DataType.kNumberTypeFloat16)) {
            return false;
        }
        ByteBuffer b = ByteBuffer.allocate(values.length * DataType.byteSize(dataType)).order(ByteOrder.LITTLE_ENDIAN);
        if (dataType == DataType.kNumberTypeFloat16) {
            for (float v : values) {
                b.putShort(Half.fromFloat(v));
            }
            b.flip();
        } else {
            b.asFloatBuffer().put(values);
        }
        return setData(b);
    }

    public boolean setData(int[] values) {
        if (values == null || !checkType(DataType.kNumberTypeInt32, DataType.kNumberTypeInt32)) {
            return false;
        }
        ByteBuffer b = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        b.asIntBuffer().put(values);
        return setData(b);
    }

    public boolean setData(long[] values) {
        if (values == null || !checkType(DataType.kNumberTypeInt64, DataType.kNumberTypeInt64)) {
            return false;
        }
        ByteBuffer b = ByteBuffer.allocate(values.length * 8).order(ByteOrder.LITTLE_ENDIAN);
        b.asLongBuffer().put(values);
        return setData(b);
    }

    /**
     * Copies little-endian bytes (as MindSpore Lite requires) from {@code buffer}: its remaining bytes when they
     * are as many as {@link #size()}; else, as MindSpore Lite reads a direct buffer, the whole buffer from index
     * 0 when its capacity is (a buffer filled with {@code put} and not flipped).
     */
    public boolean setData(ByteBuffer buffer) {
        if (buffer == null) {
            LOG.severe("setData: the buffer must not be null");
            return false;
        }
        long want = size();
        ByteBuffer from = buffer.duplicate();
        if (want >= 0 && from.remaining() != want) {
            if (from.capacity() != want) {
                LOG.severe("setData: tensor '" + name + "' of shape " + Arrays.toString(shape) + " needs " + want
                        + " bytes, got " + buffer.remaining());
                return false;
            }
            from.clear();
        }
        data = copy(from);
        return true;
    }

    /** Drops the data; the tensor keeps its name, type and shape. */
    public void free() {
        data = null;
    }

    @Override
    public String toString() {
        return "MSTensor(" + name + ", " + DataType.toKServe(dataType) + ", " + Arrays.toString(shape) + ")";
    }

    // -- used by the runner ----------------------------------------------------------------------------
    void fill(int newType, int[] newShape, ByteBuffer newData) {
        dataType = newType;
        shape = newShape.clone();
        data = newData.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
    }

    /** A tensor of the same name, type and shape sharing this one's data (which is never changed in place). */
    MSTensor share() {
        return new MSTensor(name, dataType, shape, data);
    }

    boolean hasData() {
        return data != null;
    }

    /** Bytes of data held (0 without data). */
    int dataBytes() {
        return data == null ? 0 : data.remaining();
    }

    /** The data as a primitive array for a KServe v2 JSON request. */
    Object jsonData() {
        ByteBuffer b = data.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        int n = b.remaining() / DataType.byteSize(dataType);
        switch (dataType) {
            case DataType.kNumberTypeFloat32: { float[] a = new float[n]; b.asFloatBuffer().get(a); return a; }
            case DataType.kNumberTypeFloat64: { double[] a = new double[n]; b.asDoubleBuffer().get(a); return a; }
            case DataType.kNumberTypeInt32: { int[] a = new int[n]; b.asIntBuffer().get(a); return a; }
            case DataType.kNumberTypeInt64: { long[] a = new long[n]; b.asLongBuffer().get(a); return a; }
            case DataType.kNumberTypeInt16: { short[] a = new short[n]; b.asShortBuffer().get(a); return a; }
            case DataType.kNumberTypeInt8: { byte[] a = new byte[n]; b.get(a); return a; }
            case DataType.kNumberTypeUInt8: {
                int[] a = new int[n];
                for (int i = 0; i < n; i++) {
                    a[i] = b.get() & 0xff;
                }
                return a;
            }
            case DataType.kNumberTypeBool: {
                boolean[] a = new boolean[n];
                for (int i = 0; i < n; i++) {
                    a[i] = b.get() != 0;
                }
                return a;
            }
            default:
                throw new IllegalArgumentException(
                        DataType.toKServe(dataType) + " tensors need binary data (MSContext.setBinaryData(true))");
        }
    }

    /** Little-endian bytes from a KServe v2 JSON response's "data" list. */
    static ByteBuffer fromJsonData(int dataType, List<?> values) {
        int n = values.size();
        ByteBuffer b = ByteBuffer.allocate(n * DataType.byteSize(dataType)).order(ByteOrder.LITTLE_ENDIAN);
        for (Object v : values) {
            switch (dataType) {
                case DataType.kNumberTypeFloat32: b.putFloat(((Number) v).floatValue()); break;
                case DataType.kNumberTypeFloat64: b.putDouble(((Number) v).doubleValue()); break;
                case DataType.kNumberTypeInt32: b.putInt(((Number) v).intValue()); break;
                case DataType.kNumberTypeInt64: b.putLong(((Number) v).longValue()); break;
                case DataType.kNumberTypeInt16: b.putShort(((Number) v).shortValue()); break;
                case DataType.kNumberTypeInt8:
                case DataType.kNumberTypeUInt8: b.put(((Number) v).byteValue()); break;
                case DataType.kNumberTypeBool: b.put((byte) (Boolean.TRUE.equals(v) ? 1 : 0)); break;
                default:
                    throw new IllegalArgumentException(DataType.toKServe(dataType) + " outputs need binary data");
            }
        }
        b.flip();
        return b;
    }

    private boolean is(int type) {
        return data != null && dataType == type;
    }

    private boolean checkType(int type, int orType) {
        if (dataType != type && dataType != orType) {
            LOG.severe("setData: tensor '" + name + "' is " + DataType.toKServe(dataType) + ", not "
                    + DataType.toKServe(type));
            return false;
        }
        return true;
    }

    private static int count(int[] shape) {
        long n = 1;
        for (int d : shape) {
            n *= Math.max(d, 0);
        }
        if (n > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("a tensor of shape " + Arrays.toString(shape) + " has more than "
                    + Integer.MAX_VALUE + " elements");
        }
        return (int) n;
    }

    private static int javaType(Class<?> c) {
        if (c == float.class || c == Float.class) {
            return DataType.kNumberTypeFloat32;
        } else if (c == double.class || c == Double.class) {
            return DataType.kNumberTypeFloat64;
        } else if (c == int.class || c == Integer.class) {
            return DataType.kNumberTypeInt32;
        } else if (c == long.class || c == Long.class) {
            return DataType.kNumberTypeInt64;
        } else if (c == boolean.class || c == Boolean.class) {
            return DataType.kNumberTypeBool;
        }
        return DataType.kTypeUnknown;
    }

    /** Writes {@code value}'s elements (row-major) into {@code out}; false when a row's length differs. */
    private static boolean flatten(Object value, int rank, int[] shape, int axis, int dataType, ByteBuffer out) {
        if (axis == rank) {
            switch (dataType) {
                case DataType.kNumberTypeFloat32: out.putFloat((Float) value); break;
                case DataType.kNumberTypeFloat64: out.putDouble((Double) value); break;
                case DataType.kNumberTypeInt32: out.putInt((Integer) value); break;
                case DataType.kNumberTypeInt64: out.putLong((Long) value); break;
                default: out.put((byte) ((Boolean) value ? 1 : 0));
            }
            return true;
        }
        if (Array.getLength(value) != shape[axis]) {
            return false;
        }
        for (int i = 0; i < shape[axis]; i++) {
            if (!flatten(Array.get(value, i), rank, shape, axis + 1, dataType, out)) {
                return false;
            }
        }
        return true;
    }

    private static ByteBuffer copy(ByteBuffer src) {
        ByteBuffer out = ByteBuffer.allocate(src.remaining()).order(ByteOrder.LITTLE_ENDIAN);
        out.put(src.duplicate());
        out.flip();
        return out.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
    }
}
