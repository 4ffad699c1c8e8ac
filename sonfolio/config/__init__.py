"""Typed params: pydantic models that mirror params.yaml, a module per stage's section.

Import a name from the module that defines it (`sonfolio.config.train.EngineOptions`): this
file stays empty of code, since Python runs it before any of those modules, so anything here
would put every schema in every stage's deps. A stage validates the sections it reads with
`sections.load_sections(<Stage>Params)`; `params.load_params()` validates the whole file
(`sonfolio check-params`).
"""
