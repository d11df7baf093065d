package mslite.triton;

import java.io.IOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

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
        if (!"127.0.0.1".equals(host)) {
            return null; // a key file's key goes to loopback only
        }
        try {
            Path file = keys.resolve(host + "_" + uri.getPort() + ".key");
            // a dead server's file, its port now another account's: every listener must be the file's owner's
            Object owner = Files.getAttribute(file, "unix:uid");
            if (!Set.of(owner).equals(listenerUids(uri.getPort()))) {
                return null;
            }
            String key = Files.readString(file).trim();
            return key.isEmpty() ? null : key;
        } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
            return null;
        }
    }

    /** Local addresses, as /proc/net/tcp and tcp6 write them, through which a connection to loopback may arrive. */
    private static final Set<String> REACHES_LOOPBACK = Set.of(
            "0100007F", "00000000", "00000000000000000000000001000000", "00000000000000000000000000000000",
            "0000000000000000FFFF00000100007F");

    /** The accounts owning a socket that listens on {@code port} at a loopback or wildcard address. */
    static Set<Integer> listenerUids(int port) {
        Set<Integer> uids = new HashSet<>();
        for (String table : new String[] {"/proc/net/tcp", "/proc/net/tcp6"}) {
            List<String> rows;
            try {
                rows = Files.readAllLines(Paths.get(table));
            } catch (IOException e) {
                continue;
            }
            for (String row : rows.subList(Math.min(1, rows.size()), rows.size())) {
                String[] fields = row.trim().split("\\s+");
                if (fields.length < 8 || !"0A".equals(fields[3])) {
                    continue; // 0A: listening
                }
                int colon = fields[1].indexOf(':');
                if (colon < 0 || Integer.parseInt(fields[1].substring(colon + 1), 16) != port) {
                    continue;
                }
                if (REACHES_LOOPBACK.contains(fields[1].substring(0, colon).toUpperCase())) {
                    uids.add(Integer.parseInt(fields[7]));
                }
            }
        }
        return uids;
    }
}
