package mslite.triton;

/**
 * The environment variables this client reads: the names of {@code mslite_contract/settings.py}, where each is
 * defined and documented (docs/configuration.md); a unit test checks the copies here match.
 */
final class Settings {
    /** The server's URL ({@code http://host:port}); unset: a server of this process's own is started. */
    static final String URL_ENV = "MSLITE_TRITON_URL";
    /** {@code 0}: never start a server; a build with no URL fails. */
    static final String AUTOSTART_ENV = "MSLITE_TRITON_AUTOSTART";
    /** The command that runs mslite-triton, words split at spaces (unset: {@link LocalServer#findServeCommand}). */
    static final String SERVE_CMD_ENV = "MSLITE_TRITON_SERVE_CMD";
    /** The admin key, sent on model control. */
    static final String ADMIN_KEY_ENV = "MSLITE_TRITON_KEY";
    /** Where the servers' key files live (default {@code ~/.mslite-triton/keys}). */
    static final String KEY_DIR_ENV = "MSLITE_TRITON_KEY_DIR";

    private Settings() {}

    /** The variable's value, or null when it is unset or empty. */
    static String get(String name) {
        String value = System.getenv(name);
        return value == null || value.isEmpty() ? null : value;
    }
}
