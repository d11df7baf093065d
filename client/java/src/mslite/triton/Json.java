package mslite.triton;

import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The minimal JSON this client needs: {@link #write} for requests, {@link #parse} for responses.
 *
 * <p>Parsed values are {@code Map<String, Object>} (insertion order kept), {@code List<Object>},
 * {@code String}, {@code Long} (integers), {@code Double} (other numbers), {@code Boolean} and
 * {@code null}. The writer also takes primitive arrays, so tensor data is written without boxing.
 */
public final class Json {
    private Json() {}

    /** Serialises maps, collections, strings, numbers, booleans, null and primitive arrays. */
    public static String write(Object value) {
        StringBuilder out = new StringBuilder();
        writeTo(out, value);
        return out.toString();
    }

    /** Parses one JSON document; trailing non-blank text is an error. */
    public static Object parse(String text) {
        Parser p = new Parser(text);
        p.skipBlank();
        Object value = p.value();
        p.skipBlank();
        if (p.pos != text.length()) {
            throw p.error("trailing characters");
        }
        return value;
    }

    private static void writeTo(StringBuilder out, Object v) {
        if (v == null) {
            out.append("null");
        } else if (v instanceof String) {
            writeString(out, (String) v);
        } else if (v instanceof Float || v instanceof Double) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException("JSON has no NaN or Infinity: " + v);
            }
            out.append(v); // Float.toString: the shortest text that reads back as the same float
        } else if (v instanceof Number || v instanceof Boolean) {
            out.append(v);
        } else if (v instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                writeString(out, String.valueOf(e.getKey()));
                out.append(':');
                writeTo(out, e.getValue());
            }
            out.append('}');
        } else if (v instanceof Collection) {
            out.append('[');
            boolean first = true;
            for (Object item : (Collection<?>) v) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                writeTo(out, item);
            }
            out.append(']');
        } else if (v.getClass().isArray()) {
            writeArray(out, v);
        } else {
            throw new IllegalArgumentException("cannot write " + v.getClass().getName() + " as JSON");
        }
    }

    private static void writeArray(StringBuilder out, Object array) {
        int n = java.lang.reflect.Array.getLength(array);
        out.append('[');
        for (int i = 0; i < n; i++) {
            if (i > 0) {
                out.append(',');
            }
            writeTo(out, java.lang.reflect.Array.get(array, i));
        }
        out.append(']');
    }

    private static void writeString(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                case '\b': out.append("\\b"); break;
                case '\f': out.append("\\f"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }

    private static final class Parser {
        private final String s;
        private int pos;

        Parser(String s) {
            this.s = s;
        }

        IllegalArgumentException error(String what) {
            return new IllegalArgumentException("bad JSON at offset " + pos + ": " + what);
        }

        void skipBlank() {
            while (pos < s.length() && " \t\r\n".indexOf(s.charAt(pos)) >= 0) {
                pos++;
            }
        }

        Object value() {
            if (pos >= s.length()) {
                throw error("unexpected end");
            }
            char c = s.charAt(pos);
            if (c == '{') {
                return object();
            } else if (c == '[') {
                return array();
            } else if (c == '"') {
                return string();
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                return number();
            } else if (s.startsWith("true", pos)) {
                pos += 4;
                return Boolean.TRUE;
            } else if (s.startsWith("false", pos)) {
                pos += 5;
                return Boolean.FALSE;
            } else if (s.startsWith("null", pos)) {
                pos += 4;
                return null;
            }
            throw error("unexpected '" + c + "'");
        }

        private Map<String, Object> object() {
            Map<String, Object> map = new LinkedHashMap<>();
            pos++; // {
            skipBlank();
            if (peek() == '}') {
                pos++;
                return map;
            }
            while (true) {
                skipBlank();
                if (peek() != '"') {
                    throw error("expected a key");
                }
                String key = string();
                skipBlank();
                expect(':');
                skipBlank();
                map.put(key, value());
                skipBlank();
                if (peek() == ',') {
                    pos++;
                } else {
                    expect('}');
                    return map;
                }
            }
        }

        private List<Object> array() {
            List<Object> list = new ArrayList<>();
            pos++; // [
            skipBlank();
            if (peek() == ']') {
                pos++;
                return list;
            }
            while (true) {
                skipBlank();
                list.add(value());
                skipBlank();
                if (peek() == ',') {
                    pos++;
                } else {
                    expect(']');
                    return list;
                }
            }
        }

        private String string() {
            pos++; // opening quote
            StringBuilder out = new StringBuilder();
            while (pos < s.length()) {
                char c = s.charAt(pos++);
                if (c == '"') {
                    return out.toString();
                }
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                if (pos >= s.length()) {
                    break;
                }
                char e = s.charAt(pos++);
                switch (e) {
                    case 'n': out.append('\n'); break;
                    case 'r': out.append('\r'); break;
                    case 't': out.append('\t'); break;
                    case 'b': out.append('\b'); break;
                    case 'f': out.append('\f'); break;
                    case 'u':
                        if (pos + 4 > s.length()) {
                            throw error("short \\u escape");
                        }
                        out.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
                        pos += 4;
                        break;
                    default: out.append(e); // \" \\ \/
                }
            }
            throw error("unterminated string");
        }

        private Object number() {
            int start = pos;
            boolean integral = true;
            while (pos < s.length()) {
                char c = s.charAt(pos);
                if (c == '.' || c == 'e' || c == 'E') {
                    integral = false;
                } else if (!(c == '-' || c == '+' || (c >= '0' && c <= '9'))) {
                    break;
                }
                pos++;
            }
            String text = s.substring(start, pos);
            try {
                return integral ? (Object) Long.parseLong(text) : (Object) Double.parseDouble(text);
            } catch (NumberFormatException e) {
                if (integral) {
                    return Double.parseDouble(text); // beyond long: keep it as a double
                }
                throw error("bad number '" + text + "'");
            }
        }

        private char peek() {
            if (pos >= s.length()) {
                throw error("unexpected end");
            }
            return s.charAt(pos);
        }

        private void expect(char c) {
            if (peek() != c) {
                throw error("expected '" + c + "'");
            }
            pos++;
        }
    }
}
