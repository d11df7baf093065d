package mslite.triton;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.List;
import java.util.logging.Logger;

/**
 * A tensor: name, MindSpore Lite data type, shape and little-endian data, shaped like
 * {@code com.mindspore.MSTensor}. Not synchronised: share tensors between threads only read-only, or give
 * each thread its own (as {@link ModelParallelRunner#getInputs()} does).
 */
public final class MSTensor {
    private static final Logger LOG = Logger.getLogger(MSTensor.class.getName());

    private final String name;
    private int dataType;
    private int[] shape;
    private ByteBuffer data; // little-endian, position 0; null until set

    MSTensor(String name, int dataType, int[] shape, ByteBuffer data) {
        this.name = name;
        this.dataType = dataType;
        this.shape = shape.clone();
        this.data = data;
    }

    /** A tensor over a copy of {@code buffer}'s remaining bytes (null: no data yet). */
    public static MSTensor createTensor(String tensorName, int dataType, int[] tensorShape, ByteBuffer buffer) {
        if (tensorName == null || tensorShape == null) {
            LOG.severe("createTensor: name and shape must not be null");
            return null;
        }
        DataType.byteSize(dataType); // rejects unsupported types early
        return new MSTensor(tensorName, dataType, tensorShape, buffer == null ? null : copy(buffer));
    }

    /** A float32 tensor of the given shape holding {@code values}. */
    public static MSTensor createTensor(String tensorName, int[] tensorShape, float[] values) {
        MSTensor t = createTensor(tensorName, DataType.kNumberTypeFloat32, tensorShape, null);
        if (t != null && !t.setData(values)) {
            return null;
        }
        return t;
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
    public void setShape(int[] tensorShape) {
        shape = tensorShape.clone();
    }

    /** Element count of the shape; a negative (dynamic) dimension gives -1. */
    public long elementsNum() {
        long n = 1;
        for (int d : shape) {
            if (d < 0) {
                return -1;
            }
            n *= d;
        }
        return n;
    }

    /** Size in bytes of the shape's elements (-1 for a dynamic shape). */
    public long size() {
        long n = elementsNum();
        return n < 0 ? -1 : n * DataType.byteSize(dataType);
    }

    /** A read-only little-endian view of the data (null when none was set). */
    public ByteBuffer getData() {
        return data == null ? null : data.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
    }

    public byte[] getByteData() {
        if (data == null) {
            return new byte[0];
        }
        byte[] out = new byte[data.remaining()];
        data.duplicate().get(out);
        return out;
    }

    public float[] getFloatData() {
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

    public boolean setData(float[] values) {
        if (values == null || !checkType(DataType.kNumberTypeFloat32)) {
            return false;
        }
        ByteBuffer b = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        b.asFloatBuffer().put(values);
        return setData(b);
    }

    public boolean setData(int[] values) {
        if (values == null || !checkType(DataType.kNumberTypeInt32)) {
            return false;
        }
        ByteBuffer b = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        b.asIntBuffer().put(values);
        return setData(b);
    }

    public boolean setData(long[] values) {
        if (values == null || !checkType(DataType.kNumberTypeInt64)) {
            return false;
        }
        ByteBuffer b = ByteBuffer.allocate(values.length * 8).order(ByteOrder.LITTLE_ENDIAN);
        b.asLongBuffer().put(values);
        return setData(b);
    }

    /** Copies {@code buffer}'s remaining bytes (little-endian, as MindSpore Lite requires). */
    public boolean setData(ByteBuffer buffer) {
        if (buffer == null) {
            return false;
        }
        long want = size();
        if (want >= 0 && buffer.remaining() != want) {
            LOG.severe("setData: tensor '" + name + "' of shape " + Arrays.toString(shape) + " needs " + want
                    + " bytes, got " + buffer.remaining());
            return false;
        }
        data = copy(buffer);
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
        data = newData;
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

    private boolean checkType(int type) {
        if (dataType != type) {
            LOG.severe("setData: tensor '" + name + "' is " + DataType.toKServe(dataType) + ", not "
                    + DataType.toKServe(type));
            return false;
        }
        return true;
    }

    private static ByteBuffer copy(ByteBuffer src) {
        ByteBuffer out = ByteBuffer.allocate(src.remaining()).order(ByteOrder.LITTLE_ENDIAN);
        out.put(src.duplicate());
        out.flip();
        return out;
    }
}
