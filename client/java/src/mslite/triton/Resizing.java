package mslite.triton;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;

/**
 * MindSpore Lite resizes any model, also in dims its file fixes. Here such shapes are served by the model built
 * again with {@link ModelConfigs#RESIZED_INPUTS_PARAMETER}: the server makes the dims those shapes change
 * resizable and runs the shapes once at load, so a graph that cannot take them (a Reshape to a constant shape)
 * fails with its reason. This class holds the client's half of that rule, as the Python and C++ clients do.
 */
final class Resizing {
    private Resizing() {}

    /**
     * The inputs whose new shape differs from the served one in a dim it fixes ({@code declared}: -1 where
     * dynamic), as {@code name:dim,dim;...}; "" when none does (the served model takes the shapes as they are).
     * Another rank is never a change here: the server refuses it as it is.
     */
    static String fixedDimsChanged(List<String> names, List<int[]> declared, List<int[]> shapes) {
        StringBuilder key = new StringBuilder();
        for (int i = 0; i < declared.size() && i < shapes.size(); i++) {
            int[] have = declared.get(i);
            int[] want = shapes.get(i);
            if (want == null || have.length != want.length) {
                continue;
            }
            StringBuilder dims = new StringBuilder();
            for (int d = 0; d < have.length; d++) {
                if (have[d] >= 0 && have[d] != want[d]) {
                    dims.append(dims.length() == 0 ? "" : ",").append(d);
                }
            }
            if (dims.length() > 0) {
                key.append(key.length() == 0 ? "" : ";").append(names.get(i)).append(':').append(dims);
            }
        }
        return key.toString();
    }

    /** The parameter's value: {input name: [full shape]} for every input, sorted by name. */
    static String parameter(List<String> names, List<int[]> shapes) {
        Map<String, int[]> sorted = new TreeMap<>();
        for (int i = 0; i < names.size() && i < shapes.size(); i++) {
            sorted.put(names.get(i), shapes.get(i));
        }
        return sorted.entrySet().stream().map(e -> Json.write(e.getKey()) + ":" + text(e.getValue()))
                .collect(Collectors.joining(",", "{", "}"));
    }

    /** Why a model bound with triton:// cannot take the shapes (its config is the server's). */
    static KServeHttp.ServerError bound(List<String> names, List<int[]> shapes) {
        String shown = "";
        for (int i = 0; i < names.size() && i < shapes.size(); i++) {
            shown += (shown.isEmpty() ? "'" : ", '") + names.get(i) + "' " + text(shapes.get(i));
        }
        return new KServeHttp.ServerError("kLiteNotSupport", "a model bound with triton:// keeps the shapes of its "
                + "server config; it cannot take input " + shown);
    }

    /** {@code [2,224,224,3]}: a shape as the C++ client and the server's refusals write it. */
    static String text(int[] shape) {
        return Arrays.stream(shape).mapToObj(Integer::toString).collect(Collectors.joining(",", "[", "]"));
    }
}
