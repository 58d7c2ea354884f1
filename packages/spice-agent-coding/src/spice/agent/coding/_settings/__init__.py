"""The settings: flags and variables resolved once, the settings file read per call.

``_resolve`` turns the command line and the environment into one ``Settings``;
``_values`` parses each setting's text; ``_file`` reads the settings file;
``_settings._reload`` applies it to a running server's next call; ``_settings._protection`` judges
``--unprotect`` and says what is protected; ``_settings._cache_age`` bounds unused caches.
"""
