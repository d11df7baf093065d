package mslite.triton;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.logging.Logger;

/**
 * MindSpore Lite's {@code com.mindspore.config.RunnerConfig}: the context, the worker count, config sections
 * and device ids of one {@link ModelParallelRunner}. Every setter is a no-op with an error log until
 * {@code init}, as in MindSpore Lite.
 */
public final class RunnerConfig {
    private static final Logger LOG = Logger.getLogger(RunnerConfig.class.getName());

    private boolean initialised;
    private MSContext context;
    private int workersNum;
    private final Map<String, Map<String, String>> configInfo = new LinkedHashMap<>();
    private String configPath = "";
    private final List<Integer> deviceIds = new ArrayList<>();

    public boolean init() {
        initialised = true;
        return true;
    }

    /** Takes the context (do not free it separately afterwards). */
    public boolean init(MSContext msContext) {
        if (msContext == null) {
            return false;
        }
        context = msContext;
        initialised = true;
        return true;
    }

    public void setWorkersNum(int workers) {
        if (check("setWorkersNum")) {
            workersNum = workers;
        }
    }

    /** One MindSpore Lite config section; forwarded to the server as {@code section.key} parameters. */
    public void setConfigInfo(String section, HashMap<String, String> config) {
        if (!check("setConfigInfo") || section == null || config == null) {
            return;
        }
        Map<String, String> entries = new LinkedHashMap<>();
        config.forEach((k, v) -> {
            if (k != null && v != null) {
                entries.put(k, v);
            }
        });
        configInfo.put(section, entries);
    }

    /** A MindSpore Lite config file (INI-like); read at {@link ModelParallelRunner#init}. */
    public void setConfigPath(String path) {
        if (check("setConfigPath") && path != null) {
            configPath = path;
        }
    }

    public String getConfigPath() {
        return configPath;
    }

    public void setDeviceIds(ArrayList<Integer> ids) {
        if (!check("setDeviceIds")) {
            return;
        }
        if (ids == null || ids.isEmpty() || ids.stream().anyMatch(i -> i == null || i < 0)) {
            LOG.severe("setDeviceIds: the list must be non-empty with ids >= 0; ignored");
            return;
        }
        deviceIds.clear();
        deviceIds.addAll(ids);
    }

    public ArrayList<Integer> getDeviceIds() {
        return new ArrayList<>(deviceIds);
    }

    public void free() {
        initialised = false;
    }

    // -- read by the runner ----------------------------------------------------------------------------
    MSContext context() {
        return context;
    }

    int workersNum() {
        return workersNum;
    }

    /** The config file's sections, overridden key by key by setConfigInfo's. */
    Map<String, Map<String, String>> sections() throws IOException {
        Map<String, Map<String, String>> merged = new LinkedHashMap<>();
        if (!configPath.isEmpty()) {
            Map<String, String> current = null;
            for (String raw : Files.readAllLines(Paths.get(configPath), StandardCharsets.UTF_8)) {
                String line = raw.trim();
                if (line.length() <= 2 || line.startsWith("#")) {
                    continue;
                }
                if (line.startsWith("[") && line.endsWith("]")) {
                    current = merged.computeIfAbsent(line.substring(1, line.length() - 1).trim(),
                            k -> new LinkedHashMap<>());
                } else if (line.contains("=") && current != null) {
                    int eq = line.indexOf('=');
                    current.putIfAbsent(line.substring(0, eq).trim(), line.substring(eq + 1).trim());
                }
            }
        }
        configInfo.forEach((section, entries) ->
                merged.computeIfAbsent(section, k -> new LinkedHashMap<>()).putAll(entries));
        return merged;
    }

    private boolean check(String what) {
        if (!initialised) {
            LOG.severe(what + ": RunnerConfig is not initialised; call init first");
        }
        return initialised;
    }
}
