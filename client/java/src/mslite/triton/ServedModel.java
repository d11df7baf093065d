package mslite.triton;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A runner's model on the server: the upload that makes it (told by content, with the Python client's config
 * rules) and what its metadata says about its tensors. {@link ModelParallelRunner} holds one, and, for shapes in
 * dims the model fixes, the models built again for them ({@link Resizing}).
 */
final class ServedModel {
    private ServedModel() {}

    static final class TensorSpec {
        final String name;
        final int dataType;
        final int[] shape; // as getInputs shows it: a dynamic batch dimension reads 1
        final int[] declared; // as the server declares it: -1 where dynamic

        TensorSpec(String name, int dataType, int[] shape, int[] declared) {
            this.name = name;
            this.dataType = dataType;
            this.shape = shape;
            this.declared = declared;
        }
    }

    /** A server model and its tensors. */
    record Served(String name, List<TensorSpec> inputs, List<TensorSpec> outputs) {}

    static Served describe(KServeHttp http, String name) throws KServeHttp.ServerError {
        Map<String, Object> meta = http.metadata(name);
        Map<String, Object> conf = http.config(name);
        boolean batched = ((Number) conf.getOrDefault("max_batch_size", 0L)).intValue() > 0;
        return new Served(name, specs(meta.get("inputs"), batched), specs(meta.get("outputs"), batched));
    }

    static List<String> names(List<TensorSpec> specs) {
        return specs.stream().map(s -> s.name).toList();
    }

    static List<int[]> declared(List<TensorSpec> specs) {
        return specs.stream().map(s -> s.declared).toList();
    }

    @SuppressWarnings("unchecked")
    private static List<TensorSpec> specs(Object items, boolean batched) throws KServeHttp.ServerError {
        List<TensorSpec> specs = new ArrayList<>();
        for (Object o : (List<Object>) items) {
            Map<String, Object> t = (Map<String, Object>) o;
            int dataType = DataType.fromKServe((String) t.get("datatype"));
            if (dataType == DataType.kTypeUnknown) {
                throw new KServeHttp.ServerError("kLiteNotSupport",
                        "tensor '" + t.get("name") + "' has datatype " + t.get("datatype") + ", not supported here");
            }
            List<Object> dims = (List<Object>) t.get("shape");
            int[] shape = new int[dims.size()];
            for (int i = 0; i < shape.length; i++) {
                shape[i] = ((Number) dims.get(i)).intValue();
            }
            int[] declared = shape.clone();
            if (batched && shape.length > 0 && shape[0] == -1) {
                shape[0] = 1; // code written for a static model (one sample) runs unchanged
            }
            specs.add(new TensorSpec((String) t.get("name"), dataType, shape, declared));
        }
        return specs;
    }

    /**
     * Upload the model unless the same model + config is already loaded; returns the server-side name.
     * {@code resized}: {@link Resizing#parameter}, or null.
     */
    static String upload(KServeHttp http, Path path, byte[] model, RunnerConfig cfg, String resized)
            throws IOException, KServeHttp.ServerError {
        // told by content, as the Python client does (mslite_contract/mindir.py, detect_format): ONNX's
        // ModelProto starts with field 1 as a varint (0x08), MindIR's with a string (0x0A or 0x12); the server
        // converts MindIR (with its [mindir] extra); a .ms flatbuffer has "MSL" at offset 4
        String file = "file:1/model.onnx";
        if (model.length >= 8 && model[4] == 'M' && model[5] == 'S' && model[6] == 'L') {
            throw new KServeHttp.ServerError("kLiteNotSupport", "'" + path.getFileName() + "': MindSpore Lite's .ms"
                    + " format cannot be served; serve the .mindir (or an ONNX export) the .ms file was converted from");
        } else if (model.length > 0 && (model[0] == 0x0A || model[0] == 0x12)) {
            file = "file:1/model.mindir";
        } else if (model.length == 0 || model[0] != 0x08) {
            throw new KServeHttp.ServerError("kLiteNotSupport", "'" + path.getFileName()
                    + "' is neither an ONNX nor a MindIR model");
        }
        Map<String, Object> config = ModelConfigs.build(cfg, Runtime.getRuntime().availableProcessors(), resized);
        String name = ModelConfigs.name(path, config, model);
        if (!http.modelReady(name)) {
            Map<String, Object> named = new LinkedHashMap<>(config);
            named.put("name", name);
            http.load(name, Json.write(named), Map.of(file, model));
        }
        return name;
    }
}
