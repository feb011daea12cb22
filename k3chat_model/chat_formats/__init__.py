"""Chat formats: K3's XTML markup and Jinja chat templates (see ``k3chat_model.chat_format``)."""
