package mslite.triton;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The KServe v2 HTTP/REST protocol over {@code java.net.http}: the only class that talks to the server.
 * One {@link HttpClient} (thread-safe, pooled connections) per runner; every method may be called from
 * many threads at once. Server errors become {@link ServerError}s classified in one place ({@link #check}).
 */
final class KServeHttp {
    static final String ADMIN_KEY_HEADER = "mslite-key"; // the admin key header of the model-control API
    private static final String HEADER_LENGTH = "Inference-Header-Content-Length";
    private static final Pattern TRACEBACK = Pattern.compile("\\n\\s*At:\\n.*", Pattern.DOTALL);
    private static final Pattern GPU_REFUSED =
            Pattern.compile("invalid or unsupported gpu id (\\d+).*?\\bare:\\s*([0-9][0-9, ]*)?",
                    Pattern.CASE_INSENSITIVE | Pattern.DOTALL);

    /** A failed call: a MindSpore Lite status name and the server's message (without server tracebacks). */
    static final class ServerError extends Exception {
        private static final long serialVersionUID = 1L;
        final String status;

        ServerError(String status, String message) {
            super(message);
            this.status = status;
        }

        @Override
        public String toString() {
            return status + ": " + getMessage();
        }
    }

    /** One tensor of a response. */
    static final class Output {
        final String name;
        final int dataType;
        final int[] shape;
        final ByteBuffer data;

        Output(String name, int dataType, int[] shape, ByteBuffer data) {
            this.name = name;
            this.dataType = dataType;
            this.shape = shape;
            this.data = data;
        }
    }

    private final HttpClient http;
    private final String base;
    private final String key;
    private final Duration timeout;

    KServeHttp(String url, String key, Duration timeout) throws ServerError {
        URI uri;
        try {
            uri = URI.create(url);
        } catch (IllegalArgumentException e) {
            throw new ServerError("kLiteParamInvalid", "bad server url '" + url + "'");
        }
        if (!"http".equals(uri.getScheme()) && !"https".equals(uri.getScheme()) || uri.getHost() == null) {
            throw new ServerError("kLiteParamInvalid", "server url must look like http://host:port (this client "
                    + "speaks KServe v2 over HTTP), got '" + url + "'");
        }
        this.base = url.replaceAll("/+$", "");
        this.key = key;
        this.timeout = timeout;
        // HTTP/1.1: Triton's HTTP endpoint does not speak HTTP/2, and an h2c upgrade attempt costs a round trip.
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(10)).build();
    }

    String url() {
        return base;
    }

    // -- server and model control -----------------------------------------------------------------------
    boolean live() throws ServerError {
        return send("GET", "/v2/health/live", null, null).statusCode() == 200;
    }

    boolean modelReady(String model) throws ServerError {
        return send("GET", "/v2/models/" + enc(model) + "/ready", null, null).statusCode() == 200;
    }

    @SuppressWarnings("unchecked")
    Map<String, Object> metadata(String model) throws ServerError {
        return (Map<String, Object>) json(check(send("GET", "/v2/models/" + enc(model), null, null), "kLiteError"));
    }

    @SuppressWarnings("unchecked")
    Map<String, Object> config(String model) throws ServerError {
        return (Map<String, Object>) json(
                check(send("GET", "/v2/models/" + enc(model) + "/config", null, null), "kLiteError"));
    }

    /** Uploads a model's files and config through Triton's load API (files are base64 in the JSON body). */
    void load(String model, String configJson, Map<String, byte[]> files) throws ServerError {
        Map<String, Object> params = new LinkedHashMap<>();
        params.put("config", configJson);
        files.forEach((name, bytes) -> params.put(name, Base64.getEncoder().encodeToString(bytes)));
        byte[] body = Json.write(Map.of("parameters", params)).getBytes(StandardCharsets.UTF_8);
        check(send("POST", "/v2/repository/models/" + enc(model) + "/load", body, "application/json"),
                "kLiteGraphFileError");
    }

    // -- inference --------------------------------------------------------------------------------------
    /** One request; {@code names} are the model's input names, in the order of {@code inputs}. */
    List<Output> infer(String model, List<String> names, List<MSTensor> inputs, List<String> outputs,
            boolean binary) throws ServerError {
        List<Object> ins = new ArrayList<>();
        for (int i = 0; i < inputs.size(); i++) {
            MSTensor t = inputs.get(i);
            Map<String, Object> item = new LinkedHashMap<>();
            item.put("name", names.get(i));
            item.put("shape", t.getShape());
            item.put("datatype", DataType.toKServe(t.getDataType()));
            if (binary) {
                item.put("parameters", Map.of("binary_data_size", t.size()));
            } else {
                item.put("data", t.jsonData());
            }
            ins.add(item);
        }
        List<Object> outs = new ArrayList<>();
        for (String name : outputs) {
            outs.add(binary ? Map.of("name", name, "parameters", Map.of("binary_data", true)) : Map.of("name", name));
        }
        Map<String, Object> header = new LinkedHashMap<>();
        header.put("inputs", ins);
        header.put("outputs", outs);
        byte[] head = Json.write(header).getBytes(StandardCharsets.UTF_8);
        byte[] body = head;
        String contentType = "application/json";
        if (binary) {
            ByteArrayOutputStream all = new ByteArrayOutputStream(head.length + (int) totalSize(inputs));
            all.write(head, 0, head.length);
            for (MSTensor t : inputs) {
                byte[] raw = t.getByteData();
                all.write(raw, 0, raw.length);
            }
            body = all.toByteArray();
            contentType = "application/octet-stream";
        }
        HttpResponse<byte[]> resp = send("POST", "/v2/models/" + enc(model) + "/infer", body, contentType,
                binary ? head.length : -1);
        return parseInferResponse(resp, check(resp, "kLiteError"));
    }

    private static long totalSize(List<MSTensor> inputs) {
        long n = 0;
        for (MSTensor t : inputs) {
            n += Math.max(0, t.size());
        }
        return n;
    }

    @SuppressWarnings("unchecked")
    private static List<Output> parseInferResponse(HttpResponse<byte[]> resp, byte[] body) throws ServerError {
        int jsonLength = resp.headers().firstValue(HEADER_LENGTH).map(Integer::parseInt).orElse(body.length);
        Map<String, Object> header = (Map<String, Object>) json(new String(body, 0, jsonLength, StandardCharsets.UTF_8));
        int offset = jsonLength;
        List<Output> result = new ArrayList<>();
        for (Object o : (List<Object>) header.getOrDefault("outputs", List.of())) {
            Map<String, Object> out = (Map<String, Object>) o;
            String name = (String) out.get("name");
            int dataType = DataType.fromKServe((String) out.get("datatype"));
            if (dataType == DataType.kTypeUnknown) {
                throw new ServerError("kLiteNotSupport", "output '" + name + "' has datatype " + out.get("datatype")
                        + ", which this client does not read");
            }
            List<Object> dims = (List<Object>) out.get("shape");
            int[] shape = new int[dims.size()];
            for (int i = 0; i < shape.length; i++) {
                shape[i] = ((Number) dims.get(i)).intValue();
            }
            Map<String, Object> params = (Map<String, Object>) out.getOrDefault("parameters", Map.of());
            ByteBuffer data;
            if (params.get("binary_data_size") != null) {
                int size = ((Number) params.get("binary_data_size")).intValue();
                data = ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
                data.put(body, offset, size).flip();
                offset += size;
            } else {
                data = MSTensor.fromJsonData(dataType, (List<Object>) out.get("data"));
            }
            result.add(new Output(name, dataType, shape, data));
        }
        return result;
    }

    // -- plumbing ---------------------------------------------------------------------------------------
    private HttpResponse<byte[]> send(String method, String path, byte[] body, String contentType)
            throws ServerError {
        return send(method, path, body, contentType, -1);
    }

    private HttpResponse<byte[]> send(String method, String path, byte[] body, String contentType, int headerLength)
            throws ServerError {
        HttpRequest.Builder req = HttpRequest.newBuilder(URI.create(base + path)).timeout(timeout);
        req.method(method, body == null ? HttpRequest.BodyPublishers.noBody()
                : HttpRequest.BodyPublishers.ofByteArray(body));
        if (contentType != null) {
            req.header("Content-Type", contentType);
        }
        if (headerLength >= 0) {
            req.header(HEADER_LENGTH, Integer.toString(headerLength));
        }
        if (key != null) {
            req.header(ADMIN_KEY_HEADER, key);
        }
        try {
            return http.send(req.build(), HttpResponse.BodyHandlers.ofByteArray());
        } catch (IOException e) {
            throw new ServerError("kLiteError", "cannot reach the server at " + base + ": " + e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new ServerError("kLiteError", "interrupted while waiting for " + base);
        }
    }

    /** The body of a 200 answer; otherwise the one error table: HTTP status + message -> status name. */
    private static byte[] check(HttpResponse<byte[]> resp, String otherwise) throws ServerError {
        int code = resp.statusCode();
        if (code == 200) {
            return resp.body();
        }
        String message = new String(resp.body(), StandardCharsets.UTF_8);
        try {
            Object parsed = Json.parse(message);
            if (parsed instanceof Map && ((Map<?, ?>) parsed).get("error") != null) {
                message = String.valueOf(((Map<?, ?>) parsed).get("error"));
            }
        } catch (IllegalArgumentException notJson) {
            // keep the raw text (e.g. a proxy's HTML page)
        }
        message = TRACEBACK.matcher(message).replaceAll("").trim();
        String missing = deviceMissing(message);
        if (missing != null) {
            throw new ServerError("kLiteNotSupport", missing);
        }
        String status;
        if (code == 503 && message.toLowerCase().contains("maximum queue size")) {
            status = "kLiteServiceDeny";
        } else if (code == 403 || message.contains("is restricted")) {
            status = "kLiteError";
            message = "permission denied (the model-control API needs the admin key: set " + Settings.ADMIN_KEY_ENV
                    + "): " + message;
        } else if (code == 404 || message.contains("unknown model") || message.contains("is not found")) {
            status = "kLiteError";
            message = "model not found: " + message;
        } else if (code == 400 && "kLiteError".equals(otherwise)) {
            status = "kLiteInputTensorError";
        } else {
            status = otherwise;
        }
        throw new ServerError(status, message + " (HTTP " + code + ")");
    }

    /**
     * The clients' one wording for a device the server lacks ("GPU 0 is not available on the server (the GPUs it
     * can use: none)"), from Triton's refusal of a GPU instance group; null for other messages. The Python
     * client's {@code _error_table.device_missing} and the C++ client's {@code DeviceMissing} say the same.
     */
    static String deviceMissing(String message) {
        Matcher found = GPU_REFUSED.matcher(message);
        if (!found.find()) {
            return null;
        }
        String usable = found.group(2) == null ? "" : String.join(", ", found.group(2).trim().split("[,\\s]+"));
        return "GPU " + found.group(1) + " is not available on the server (the GPUs it can use: "
                + (usable.isEmpty() ? "none" : usable) + ")";
    }

    private static Object json(byte[] body) throws ServerError {
        return json(new String(body, StandardCharsets.UTF_8));
    }

    private static Object json(String text) throws ServerError {
        try {
            return Json.parse(text);
        } catch (IllegalArgumentException e) {
            throw new ServerError("kLiteError", "the server's answer is not JSON: " + e.getMessage());
        }
    }

    private static String enc(String name) {
        return URLEncoder.encode(name, StandardCharsets.UTF_8).replace("+", "%20");
    }
}
