package mslite.triton;

import java.io.IOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;

/**
 * Where the server is, as the Python client decides it ({@code client/mslite_triton/_endpoint.py}): the context's
 * URL, else {@code MSLITE_TRITON_URL}, else a server of this program's own ({@link LocalServer}); and the admin
 * key to send it.
 */
final class Endpoint {
    private static final Duration TIMEOUT = Duration.ofSeconds(120);

    private Endpoint() {}

    /** A live connection to the server: {@code explicitUrl} when not null, else as the class comment says. */
    static KServeHttp connect(String explicitUrl) throws KServeHttp.ServerError {
        String url = explicitUrl != null ? explicitUrl : Settings.get(Settings.URL_ENV);
        KServeHttp http;
        if (url == null) {
            LocalServer own = LocalServer.get(); // its key is the one it printed: each start makes a fresh one
            http = new KServeHttp(own.url, own.adminKey, TIMEOUT);
        } else {
            http = new KServeHttp(url, adminKey(url), TIMEOUT);
        }
        if (!http.live()) {
            throw new KServeHttp.ServerError("kLiteError", "the server at " + http.url() + " is not live");
        }
        return http;
    }

    /**
     * The admin key the model-control API asks for: {@code MSLITE_TRITON_KEY}, else the key file the server
     * wrote for this host and port ({@code $MSLITE_TRITON_KEY_DIR} or {@code ~/.mslite-triton/keys},
     * {@code <host>_<port>.key}), else null. Inference needs no key.
     */
    static String adminKey(String url) {
        String env = Settings.get(Settings.ADMIN_KEY_ENV);
        if (env != null) {
            return env;
        }
        URI uri;
        try {
            uri = URI.create(url);
        } catch (IllegalArgumentException e) {
            return null;
        }
        if (uri.getHost() == null || uri.getPort() < 0) {
            return null;
        }
        String dir = Settings.get(Settings.KEY_DIR_ENV);
        Path keys = dir != null ? Paths.get(dir) : Paths.get(System.getProperty("user.home"), ".mslite-triton", "keys");
        String host = "localhost".equals(uri.getHost()) ? "127.0.0.1" : uri.getHost();
        try {
            String key = Files.readString(keys.resolve(host + "_" + uri.getPort() + ".key")).trim();
            return key.isEmpty() ? null : key;
        } catch (IOException e) {
            return null;
        }
    }
}
