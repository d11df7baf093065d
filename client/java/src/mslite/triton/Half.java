package mslite.triton;

/** IEEE 754 half precision (float16) to and from float: JDK 17 has no Float.float16ToFloat yet. */
final class Half {
    private Half() {}

    static float toFloat(short bits) {
        int h = bits & 0xffff;
        int sign = (h & 0x8000) << 16;
        int exponent = (h >>> 10) & 0x1f;
        int mantissa = h & 0x3ff;
        if (exponent == 0x1f) { // infinity or NaN
            return Float.intBitsToFloat(sign | 0x7f800000 | (mantissa << 13));
        }
        if (exponent == 0) { // zero or subnormal: mantissa x 2^-24, exact in float
            float magnitude = mantissa * 0x1p-24f;
            return sign == 0 ? magnitude : -magnitude;
        }
        return Float.intBitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
    }

    /** Rounds to the nearest half, ties to even; overflow gives infinity, NaN stays NaN. */
    static short fromFloat(float value) {
        int f = Float.floatToRawIntBits(value);
        int sign = (f >>> 16) & 0x8000;
        int exponent = (f >>> 23) & 0xff;
        int mantissa = f & 0x7fffff;
        if (exponent == 0xff) {
            return (short) (sign | 0x7c00 | (mantissa != 0 ? 0x200 : 0));
        }
        int e = exponent - 112; // the half's biased exponent
        if (e >= 0x1f) {
            return (short) (sign | 0x7c00);
        }
        if (e <= 0) { // subnormal half (or zero): shift the full significand into place, rounding
            if (e < -10) {
                return (short) sign;
            }
            int significand = mantissa | 0x800000;
            int shift = 14 - e;
            int half = significand >>> shift;
            int rest = significand & ((1 << shift) - 1);
            int midpoint = 1 << (shift - 1);
            if (rest > midpoint || (rest == midpoint && (half & 1) == 1)) {
                half++;
            }
            return (short) (sign | half);
        }
        int half = (e << 10) | (mantissa >>> 13);
        int rest = mantissa & 0x1fff;
        if (rest > 0x1000 || (rest == 0x1000 && (half & 1) == 1)) {
            half++; // may carry into the exponent, up to infinity: still correct
        }
        return (short) (sign | half);
    }
}
